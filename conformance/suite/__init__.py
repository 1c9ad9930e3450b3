"""The conformance suite's tests, one module per area, each test tagged with guarantee ids.

Run through the plugin (conformance/plugin.py): `pytest --pyargs conformance --bootstrap-servers ...`
or `kspec conformance --bootstrap-servers ...`.
"""
