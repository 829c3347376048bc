# Two commands do all set-up on a fresh machine: `make bench` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.netbench-installed
LABEL  ?= ci
SUITE  ?= suites/ci.toml

.PHONY: setup sysdeps bench test lint bench-compare clean

# System tools the tests and reference comparisons use; installed when we are root with apt,
# otherwise reported (tests that need them skip and say why).
SYSTEM_TOOLS := ip:iproute2 tc:iproute2 iperf3:iperf3 sockperf:sockperf
sysdeps:
	@missing=""; for pair in $(SYSTEM_TOOLS); do \
	  tool=$${pair%%:*}; pkg=$${pair##*:}; \
	  command -v $$tool >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends $$missing >/dev/null; \
	  else echo "missing system packages:$$missing (tests that need them will skip)"; fi; \
	fi

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

bench: $(STAMP)
	$(BIN)/netbench run $(SUITE) --label $(LABEL)

test: sysdeps $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check netbench tests bench

bench-compare: sysdeps $(STAMP)
	$(BIN)/python bench/vs_reference.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
