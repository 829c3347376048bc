# Two commands do all set-up on a fresh machine, in either order: `make bench` and `make test`.
# Both first install what the venv is built against (as root with apt), then `make setup`
# (tools/setup-venv.sh) builds or rebuilds the venv: one rule for which Python it comes from
# and when what it was built against changed.
VENV   ?= .venv
BIN    := $(VENV)/bin
LABEL  ?= ci
SUITE  ?= suites/ci.toml
RESULTS ?= results
export VENV
# Passed to tools/setup-venv.sh only when given: TORCH_SPEC= (empty) means "no torch".
ifneq ($(origin PYTHON),undefined)
export PYTHON
endif
ifneq ($(origin TORCH_SPEC),undefined)
export TORCH_SPEC
endif

.PHONY: setup builddeps sysdeps bench test check lint bench-compare bench-softroce gpu-check instructions \
        instructions-rdma clean

# What the venv is built against: a compiler and the headers for the compiled data planes
# (tcp's _fastloop.c, the RDMA _verbsloop.c), and Debian's pyverbs for /usr/bin/python3 (with
# venv support), so the RDMA benchmarks can run and the fabric ranks in the soft-RoCE VM, which
# run from this venv, can import it; valgrind's callgrind.h, so the RDMA loops can be counted
# (docs/instructions.md). NEED:PACKAGE, see tools/sysdeps.sh.
SYS_PY_INCLUDE := $(shell /usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || echo /usr/include/python3)
BUILD_DEPS := gcc:gcc /usr/include/stdio.h:libc6-dev \
              /usr/include/infiniband/verbs.h:libibverbs-dev \
              py:pyverbs:python3-pyverbs py:ensurepip:python3-venv \
              $(SYS_PY_INCLUDE)/Python.h:python3-dev \
              /etc/libibverbs.d/rxe.driver:ibverbs-providers \
              /usr/include/valgrind/callgrind.h:valgrind
# System tools the tests and reference comparisons use (tests that need one skip without it).
TEST_TOOLS := ip:iproute2 tc:iproute2 iperf3:iperf3 sockperf:sockperf chromium:chromium \
              modprobe:kmod mpirun:openmpi-bin unshare:util-linux ps:procps \
              lldpd:lldpd lldpcli:lldpd \
              ibsim:ibsim-utils opensm:opensm dump_fts:infiniband-diags ibtracert:infiniband-diags \
              ethtool:ethtool valgrind:valgrind \
              promtool:prometheus prometheus-node-exporter:prometheus-node-exporter
builddeps:
	@tools/sysdeps.sh $(BUILD_DEPS)
sysdeps: builddeps
	@tools/sysdeps.sh $(TEST_TOOLS)

setup: builddeps
	@tools/setup-venv.sh

bench: setup
	$(BIN)/netbench run $(SUITE) --label $(LABEL) --results $(RESULTS)
	$(BIN)/netbench report --results $(RESULTS) -o $(RESULTS)/_dashboard.html

test: sysdeps setup
	$(BIN)/python -m pytest -q --durations=15

# The fast tier: every test but the known-answer ones (tests/known_answers.txt), to run on
# every edit; `make test` stays the whole suite that CI and README run.
check: setup
	$(BIN)/python -m pytest -q -m "not known_answer" --durations=5

lint: setup
	$(BIN)/ruff check netbench tests bench

# Where an RDMA device is present (NETBENCH_RDMA_DEV and NETBENCH_RDMA_ADDR set, perftest
# installed), the RDMA figures beside perftest's as well.
bench-compare: sysdeps setup
	$(BIN)/python bench/vs_reference.py
	$(BIN)/python bench/coll_vs_torch.py
	@if [ -n "$$NETBENCH_RDMA_DEV" ] && [ -n "$$NETBENCH_RDMA_ADDR" ]; then \
	  $(BIN)/python bench/rdma_vs_perftest.py --rounds 3; \
	else echo "bench-compare: RDMA vs perftest skipped: set NETBENCH_RDMA_DEV and" \
	  "NETBENCH_RDMA_ADDR (this host's IP on that device's netdev) to run it"; fi

# The instrument's own cost, counted not timed: user-space instructions per operation of
# netbench and of sockperf / iperf3 under callgrind, side by side (docs/instructions.md).
INSTR_TOOLS := valgrind:valgrind sockperf:sockperf iperf3:iperf3
instructions: setup
	@tools/sysdeps.sh $(INSTR_TOOLS)
	$(BIN)/python bench/instructions_per_op.py --out $(RESULTS)/instructions
# The RDMA points beside perftest, in the soft-RoCE VM (~15 minutes under TCG); the rows are
# imported into $(RESULTS). COUNT_POINTS=a,b and COUNT_SCALE=0.5 narrow it.
instructions-rdma: setup
	@tools/sysdeps.sh valgrind:valgrind
	rm -rf $(SOFTROCE_OUT) && mkdir -p $(SOFTROCE_OUT)
	OUT=$(SOFTROCE_OUT) tools/softroce/run-vm.sh tools/softroce/count.sh "$(COUNT_POINTS)" \
	  "$(or $(COUNT_SCALE),1)"
	$(BIN)/netbench import $(SOFTROCE_OUT)/instructions.jsonl --results $(RESULTS)

# On a GPU machine: every GPU check in one go, figures beside independent references where
# they exist. Exit 0 only when every check ran and passed, 1 on a miss, 2 when one could not
# run here (no torch, no CUDA, no nvbandwidth/nccl-tests/RDMA device...); make then says
# "Error 1"/"Error 2" and exits 2. ALLOW_UNCHECKED='nccl.*,rdma.*' accepts those named.
ALLOW_UNCHECKED ?=
gpu-check: setup
	$(BIN)/python bench/gpu_check.py $(if $(ALLOW_UNCHECKED),--allow-unchecked '$(ALLOW_UNCHECKED)')

# RDMA on a real soft-RoCE device for hosts whose kernel has none (this project's CI): boots a
# throw-away VM with Debian's stock kernel, runs suites/rdma-ci.toml there (loopback and through
# `netbench serve`) plus the perftest cross-check; then three guests, each with its own rxe
# device, sweep every pair (fabric); the rows go into results/.
SOFTROCE_OUT ?= /tmp/netbench-softroce/out
bench-softroce: setup
	rm -rf $(SOFTROCE_OUT) && mkdir -p $(SOFTROCE_OUT)
	OUT=$(SOFTROCE_OUT) tools/softroce/run-vm.sh tools/softroce/in-vm.sh
	OUT=$(SOFTROCE_OUT) SKIP_INSTALL=1 NODES=3 NICS=2 tools/softroce/run-vm.sh tools/softroce/fabric.sh
	$(BIN)/netbench import $(SOFTROCE_OUT)/*.jsonl --results results

# A one-node Slurm cluster on this machine, for the fabric sweep a real srun launches
# (tests/test_slurm.py, which skips without one): Debian's slurm-wlm (slurmctld, slurmd,
# slurm-client's srun) and munge, then tools/slurm/start.sh starts the daemons and waits until
# a job runs (idempotent). CI runs it before `make test`.
SLURM_DEPS := slurmctld:slurm-wlm slurmd:slurm-wlm srun:slurm-client scontrol:slurm-client \
              munged:munge
.PHONY: slurm
slurm:
	@tools/sysdeps.sh $(SLURM_DEPS)
	tools/slurm/start.sh

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
