# kspec: two commands set up and run everything on a fresh machine.
#   make demo   the main job (installs what it needs first)
#   make test   the project's tests
#   make bench  measured figures (benchmarks/README.md)

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
STREAMS_VENV := .venv-streams
STREAMS_STAMP := $(STREAMS_VENV)/.installed
JS_DIR := conformance/clients/js
DEBIAN_PACKAGES := kcat iproute2 iptables default-jre-headless

.PHONY: all setup system-packages node-packages record-walk demo test bench clean

all: test

setup: $(STAMP) $(STREAMS_STAMP) system-packages node-packages record-walk

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $(STAMP)

# The Quix Streams application of `kspec faults run --workload quixstreams` (faults/streams_app.py) runs
# from its own virtualenv: Quix Streams pins an older confluent-kafka than the kit's clients.
$(STREAMS_STAMP): pyproject.toml
	$(PYTHON) -m venv $(STREAMS_VENV)
	$(STREAMS_VENV)/bin/pip install -q --upgrade pip
	$(STREAMS_VENV)/bin/pip install -q -e '.[streams]'
	touch $(STREAMS_STAMP)

# The LogValidator's record walk in C (setup.py), built next to its source: the checkout is what
# the editable install imports. Without a compiler the broker walks records in Python, slower.
record-walk: $(STAMP)
	@$(PY) setup.py -q build_ext --inplace 2>/dev/null || echo "warning: the C record walk was not built; the broker validates records in Python"

# Debian packages the tests use (kcat as a client, iproute2/iptables for network
# namespaces, a JRE for Spark, docker.io for the fault harness's Docker target, fuse3 and
# faketime for the power, io and clock nemeses). Installed only when missing and when run as root.
system-packages:
	@missing=""; \
	command -v kcat >/dev/null || missing="$$missing kcat"; \
	command -v ip >/dev/null || missing="$$missing iproute2"; \
	command -v iptables >/dev/null || missing="$$missing iptables"; \
	command -v java >/dev/null || missing="$$missing default-jre-headless"; \
	command -v dockerd >/dev/null || missing="$$missing docker.io"; \
	command -v fusermount3 >/dev/null || missing="$$missing fuse3"; \
	command -v faketime >/dev/null || missing="$$missing faketime"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null) \
	      || echo "warning: could not install$$missing; tests that need them will be skipped"; \
	  else \
	    echo "warning: missing$$missing (run as root to install); tests that need them will be skipped"; \
	  fi; \
	fi

# kafkajs for the JavaScript client tests, from the npm registry.
node-packages: $(JS_DIR)/node_modules/.installed

$(JS_DIR)/node_modules/.installed: $(JS_DIR)/package.json
	@if command -v npm >/dev/null; then \
	  (cd $(JS_DIR) && npm install --no-audit --no-fund --loglevel=error) && touch $@; \
	else echo "warning: npm missing; kafkajs tests will be skipped"; fi

demo: setup
	$(VENV)/bin/kspec demo

# Two test processes (pytest-xdist), each taking whole files: most tests wait on clusters, elections
# and timeouts, so two at a time fit the two cores of the machines CI runs on.
TEST_WORKERS ?= 2

test: setup
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=30 -n $(TEST_WORKERS) --dist loadfile -m 'not soak' tests

bench: setup
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) $(STREAMS_VENV) $(JS_DIR)/node_modules reports/latest
