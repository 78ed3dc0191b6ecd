# Every target sets up what it needs (Debian packages, the venv, pip installs) when missing.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.lamplighter-installed
LOCAL_STAMP := $(VENV)/.lamplighter-local
GPUSIM  := build/gpusim/lib/libamd_smi.so
PROMTOOL := build/promtool/usr/bin/promtool
PYTEST_ARGS ?=

TITAN_ENV := build/torchtitan-env

.PHONY: install test test-fast busy-queue lint typecheck promtool dist titan-env demo demo-torchtitan demo-slurm demo-bare demo-results bench-slurm scale scale-lighthouse scale-slurm-rpc scale-etcd scale-report soak bench bench-costs bench-big bench-heal bench-stall bench-hw plan-inputs cluster-up cluster-down gpusim readme clean

install: $(STAMP)

# torch is pinned and installed first: any other torch requirement downloads a multi-GB CUDA build.
# Local mode (make demo) needs only the venv: no root, no Debian package, no Slurm.
$(LOCAL_STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install -q --disable-pip-version-check -e '.[trainer,plots]'
	touch $@

# Everything else (the tests, the Slurm and bare-metal labs): Debian's Slurm, munge, etcd, gcc (as root or sudo).
$(STAMP): $(LOCAL_STAMP) tools/ensure-system-deps.sh
	bash tools/ensure-system-deps.sh
	$(BIN)/pip install -q --disable-pip-version-check -e '.[trainer,plots,gpusim,test]'
	touch $@

# A job's own interpreter for make scale's Slurm lab, whose job is submitted by a throwaway user: Debian's python3
# (this venv's lives under /root, which no other account reaches), lamplighter and torchft's native module without
# torch (its replicas and Lighthouse need no torch). Under build/, so the repository must be readable by all.
USER_VENV := build/user-venv
$(USER_VENV)/.installed: setup.cfg pyproject.toml
	test -x $(USER_VENV)/bin/python || /usr/bin/python3 -m venv $(USER_VENV)
	$(USER_VENV)/bin/pip install -q --disable-pip-version-check --no-deps $$(grep -o 'torchft-nightly==[0-9.]*' setup.cfg)
	$(USER_VENV)/bin/pip install -q --disable-pip-version-check -e .
	touch $@

gpusim: $(STAMP)
	$(BIN)/python -m lamplighter.gpusim.build --out build/gpusim

# promtool checks the alert rules (tests/deploy); taken from Debian's prometheus package, which is not installed.
promtool:
	bash tools/promtool.sh build/promtool

# The sdist and the wheel, as a release: dist/ (twine check dist/* passes; tests/packaging builds them too).
dist: $(STAMP)
	rm -rf dist && $(BIN)/python -m build --outdir dist . && $(BIN)/twine check dist/*

# No import cycle between the top-level folders (the README's architecture graph).
lint: $(STAMP)
	$(BIN)/python tools/import_graph.py
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# lamplighter/<folder> are links to the top-level folders, so mypy reads the tree as installed.
# bench/ too: no test runs the whole benchmark, and a name it imports can vanish in a refactor.
typecheck: $(STAMP)
	$(BIN)/mypy lamplighter tools/import_graph.py bench

# The real torchtitan 0.3 from PyPI in a venv of its own (torch 2.13.0 first; generated data and tokenizer):
# the torchtitan tests and `make demo-torchtitan` run it. Built once; about 1.5 GB.
titan-env: $(STAMP)
	$(BIN)/python -m lamplighter.lab.torchtitan_env --dir $(TITAN_ENV)

# Side by side (pytest-xdist): the heaviest tests start first (tests/conftest.py) and each runs its own cluster
# on its own ports; pytest prints the 15 slowest at the end (setup.cfg).
# Two workers on this 2-core machine: with three, the heaviest tests starved each other's trainers long enough
# for survivors to be read as hung (a chaos test's cascade of restarts with no live peer); TEST_WORKERS=3 is
# about 3 minutes faster where that cannot happen.
TEST_WORKERS ?= 2
test: lint typecheck gpusim promtool titan-env
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The unit tier, for the inner loop: no Slurm, no etcd, no trainer processes (under a minute).
test-fast: $(STAMP)
	$(BIN)/pytest -n 2 -m "not integration" $(PYTEST_ARGS)

demo: $(LOCAL_STAMP)
	$(BIN)/lamplighter local configs/demo.yaml --run-dir runs/demo-$$(date +%Y%m%d-%H%M%S)

# The real torchtitan (PyPI) under `lamplighter local`, 3 groups, per-step and DiLoCo, each through a kill, an
# exception, a hang and a Lighthouse kill: build/demo-torchtitan/report.json (about 10 minutes).
demo-torchtitan: titan-env
	$(BIN)/python -m lamplighter.lab.demo_torchtitan --dir build/demo-torchtitan --env $(TITAN_ENV)

# The whole Slurm path on a real local cluster: daemons, submit, one fault of each kind, report.
demo-slurm: $(STAMP)
	$(BIN)/python -m lamplighter.lab.demo --dir build/demo-slurm

# Bare metal without Slurm: 4 hosts + 1 spare in network namespaces, etcd (3 members, TLS), a kill, a hang,
# a GPU fault, a crash of the placer's host and a cut link: build/demo-bare/report.json (needs root).
demo-bare: $(STAMP) gpusim
	$(BIN)/python -m lamplighter.lab.demo_bare --dir build/demo-bare

# The three demos above, once each at one clean commit, kept in bench/results and printed into the README
# (about 15 minutes; demo-bare needs root).
demo-results: $(STAMP) gpusim
	$(BIN)/python -m bench.demos
	$(MAKE) plan-inputs

# Slurm's own latencies on the test cluster, without lamplighter (about 2 minutes): bench/results/slurm_timings.json.
bench-slurm: $(STAMP)
	$(BIN)/python -m bench.slurm_timings

# torchft's Lighthouse with 4..512 torch-free replica groups (lab/scale_replica.py), one killed or hung and brought back
# at a time, and steps longer than the join timeout (about 8 minutes; #31): bench/results/lighthouse_scale.json, .png.
scale-lighthouse: $(STAMP)
	$(BIN)/python -m bench.lighthouse_scale

# slurmctld RPCs per second by type and by sender (sdiag), at steady state and per fault, with a node daemon per node
# and one lamplighter job of a group per node (torch-free replicas speaking torchft's protocol to the job's
# Lighthouse), at 4, 16 and 64 nodes, each node (its slurmd, jobs and daemon) in network, PID and mount namespaces of
# its own, the job submitted by a throwaway user, each fault struck 3 times per size (about 13 minutes):
# bench/results/slurm_rpc_scale.json.
scale-slurm-rpc: $(STAMP) gpusim $(USER_VENV)/.installed
	$(BIN)/python -m bench.slurm_rpc_scale --nodes 4,16,64

# etcd requests per bare-metal host at 4, 16 and 64 hosts (each its own namespaces and host daemon process), steady
# and while a dead host's group moves (about 4 minutes): bench/results/etcd_scale.json.
scale-etcd: $(STAMP)
	$(BIN)/python -m bench.etcd_scale --hosts 4,16,64

# All of #31's measures against the node count, and the Lighthouse's against the group count (about 24 minutes):
# build/scale/report.json and report.png. The result files go to bench/results; scale-report alone redraws.
scale: scale-slurm-rpc scale-etcd scale-lighthouse scale-report

scale-report: $(STAMP)
	$(BIN)/python -m bench.scale_report

# Overlapping faults of every kind on the Slurm lab until 100 have struck, the job training until they are
# done (its wall time is in the report): build/soak/report.json.
soak: $(STAMP) gpusim
	$(BIN)/python -m lamplighter.lab.soak --dir build/soak

# A busy queue (#41): another user's top-priority jobs take every node a group gives up, so a requeued or renewing
# group waits for the next free node (up to 60 s); does the job keep a live peer? (about 10 minutes):
# bench/results/busy_queue.json, .png.
busy-queue: $(STAMP) gpusim
	$(BIN)/python -m bench.busy_queue
	$(MAKE) plan-inputs

# The benchmark that decides (about 45 minutes here): the same delivered faults for lamplighter, the poll runner and
# checkpoint-restart, small and big state; what one fault costs, per kind; and what lamplighter costs. One commit, stamped.
bench: $(STAMP) gpusim
	$(BIN)/python -m bench
	$(MAKE) plan-inputs

# Parts of `make bench` on their own (their files then carry this run's stamp, not the full run's).
bench-costs: $(STAMP) gpusim
	$(BIN)/python -m bench --only overhead,quorum,gpu-probe,daemon

# lamplighter against the baselines when every replica holds 1 GB more state (heals and checkpoints carry it).
bench-big: $(STAMP) gpusim
	$(BIN)/python -m bench --only big

# Parts with a stamp of their own (bench/results/bench_run_heal.json, bench_run_stall.json), run at the same commit.
# Heal bandwidth per transport, 10 MB to 4 GB, next to memcpy (about 10 minutes; needs about 10 GB free).
bench-heal: $(STAMP)
	$(BIN)/python -m bench --only heal

# The survivors' stall at 3, 6 and 12 groups for a kill, a silent node and a hang, local mode (about 10 minutes).
bench-stall: $(STAMP)
	$(BIN)/python -m bench --only stall
	$(MAKE) plan-inputs

# A GPU fault and a node crash to the group running elsewhere on the Slurm lab, 5 rounds (#43 item 8):
# bench/results/hw_fault_path.json, one of plan's measured inputs.
bench-hw: $(STAMP) gpusim
	$(BIN)/python -m bench.hw_fault_path

# `lamplighter plan`'s measured inputs, read from bench/results into the snapshot the package ships
# (tests/plan checks the two agree: run this after any run that rewrites a file plan reads).
plan-inputs: $(STAMP)
	$(BIN)/python -m lamplighter.plan.measured bench/results > plan/measured_inputs.json.tmp
	mv plan/measured_inputs.json.tmp plan/measured_inputs.json

cluster-up: $(STAMP)
	$(BIN)/python -m lamplighter.lab cluster up --dir build/cluster

cluster-down: $(STAMP)
	$(BIN)/python -m lamplighter.lab cluster down --dir build/cluster

readme: $(STAMP)
	$(BIN)/python -m lamplighter.configs.reference docs/config.md

clean:
	rm -rf build runs .mypy_cache .ruff_cache .pytest_cache
