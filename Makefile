# Two commands do all set-up on a fresh machine: `make bench` and `make test`.
# Debian's python3-pyverbs exists only for the distribution's Python: where it is installed,
# build the venv from that Python (with its site-packages) so the RDMA benchmarks can run.
PYTHON ?= $(shell /usr/bin/python3 -c 'import pyverbs, ensurepip' >/dev/null 2>&1 \
            && echo /usr/bin/python3 || echo python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.netbench-installed
LABEL  ?= ci
SUITE  ?= suites/ci.toml
RESULTS ?= results

.PHONY: setup sysdeps bench test lint bench-compare bench-softroce gpu-check clean

# System tools the tests and reference comparisons use; installed when we are root with apt,
# otherwise reported (tests that need them skip and say why).
# The headers are what the compiled RDMA data plane needs (paths, checked with test -e).
SYSTEM_TOOLS := ip:iproute2 tc:iproute2 iperf3:iperf3 sockperf:sockperf chromium:chromium \
                gcc:gcc modprobe:kmod mpirun:openmpi-bin unshare:util-linux
PY_INCLUDE   := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
SYSTEM_FILES := /usr/include/infiniband/verbs.h:libibverbs-dev $(PY_INCLUDE)/Python.h:python3-dev
sysdeps:
	@missing=""; for pair in $(SYSTEM_TOOLS); do \
	  tool=$${pair%%:*}; pkg=$${pair##*:}; \
	  command -v $$tool >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	for pair in $(SYSTEM_FILES); do \
	  file=$${pair%%:*}; pkg=$${pair##*:}; \
	  test -e $$file || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends $$missing >/dev/null; \
	  else echo "missing system packages:$$missing (tests that need them will skip)"; fi; \
	fi

# torch for the collectives (gloo on CPU, nccl on GPUs) and the GPU feed; TORCH_SPEC= skips it
# (coll.* and gpu.* then skip with the reason). A torch the base Python already has (a GPU
# machine's CUDA build) is kept, seen through --system-site-packages; otherwise torch==2.13.0
# resolves to the CPU build this project's machines carry.
TORCH_SPEC ?= $(shell $(PYTHON) -c 'import torch' >/dev/null 2>&1 || echo torch==2.13.0)
$(STAMP): pyproject.toml netbench/_fastloop.c netbench/benchmarks/_verbsloop.c
	test -x $(BIN)/python || $(PYTHON) -m venv --system-site-packages $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test]' $(TORCH_SPEC)
	touch $(STAMP)

setup: $(STAMP)

bench: $(STAMP)
	$(BIN)/netbench run $(SUITE) --label $(LABEL) --results $(RESULTS)
	$(BIN)/netbench report --results $(RESULTS) -o $(RESULTS)/_dashboard.html

test: sysdeps $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check netbench tests bench

# Where an RDMA device is present (NETBENCH_RDMA_DEV and NETBENCH_RDMA_ADDR set, perftest
# installed), the RDMA figures beside perftest's as well.
bench-compare: sysdeps $(STAMP)
	$(BIN)/python bench/vs_reference.py
	$(BIN)/python bench/coll_vs_torch.py
	@if [ -n "$$NETBENCH_RDMA_DEV" ] && [ -n "$$NETBENCH_RDMA_ADDR" ]; then \
	  $(BIN)/python bench/rdma_vs_perftest.py --rounds 3; \
	else echo "bench-compare: RDMA vs perftest skipped: set NETBENCH_RDMA_DEV and" \
	  "NETBENCH_RDMA_ADDR (this host's IP on that device's netdev) to run it"; fi

# On a GPU machine: every GPU check in one go, each figure beside its reference.
gpu-check: $(STAMP)
	$(BIN)/python bench/gpu_check.py

# RDMA on a real soft-RoCE device for hosts whose kernel has none (this project's CI): boots a
# throw-away VM with Debian's stock kernel, runs suites/rdma-ci.toml there (loopback and through
# `netbench serve`) plus the perftest cross-check; then three guests, each with its own rxe
# device, sweep every pair (fabric); the rows go into results/.
SOFTROCE_OUT ?= /tmp/netbench-softroce/out
bench-softroce: $(STAMP)
	rm -rf $(SOFTROCE_OUT) && mkdir -p $(SOFTROCE_OUT)
	OUT=$(SOFTROCE_OUT) tools/softroce/run-vm.sh tools/softroce/in-vm.sh
	OUT=$(SOFTROCE_OUT) SKIP_INSTALL=1 NODES=3 NICS=2 tools/softroce/run-vm.sh tools/softroce/fabric.sh
	$(BIN)/netbench import $(SOFTROCE_OUT)/*.jsonl --results results

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
