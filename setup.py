"""The one compiled part of kspec: the LogValidator's record walk (reference/protocol/_record_walk.c).
Everything else is in pyproject.toml. Without a C compiler the install still works and the
broker walks records in Python, about a hundred times slower (reference/protocol/validator.py)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("reference.protocol._record_walk", ["reference/protocol/_record_walk.c"],
                             extra_compile_args=["-O2"], optional=True)])
