# specdeploy: `make help` lists the targets. Everything sets itself up (venv, apt, downloads).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON      ?= python3
VENV        := .venv
BIN         := $(VENV)/bin
CACHE       ?= $(or $(SPECDEPLOY_CACHE),$(HOME)/.cache/specdeploy)
INVENTORY   ?= inventory/production
SANDBOX_INV := inventory/sandbox
NODES       ?= 1
EXTRA       ?=
TO          ?=
PYTEST_ARGS ?=
export SPECDEPLOY_CACHE := $(CACHE)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# tests/testbed (sandbox, bench, demo): test tooling, importable as `testbed`, never in a release
export PYTHONPATH := $(CURDIR)/tests$(if $(PYTHONPATH),:$(PYTHONPATH))
PLAYBOOK    := $(BIN)/ansible-playbook
# Host packages the tools need (debootstrap and systemd-nspawn for the sandbox nodes; promtool,
# node_exporter and a headless chromium for the monitoring and report tests; haproxy, the
# sandbox's load balancer for the drain; nftables, to cut one sandbox node off the network in
# the fault suite).
APT_PACKAGES := debootstrap systemd-container openssh-client iproute2 procps psmisc \
                prometheus prometheus-node-exporter chromium haproxy nftables

.PHONY: drafter drafter-venv help setup demo test test-faults lint collection bench deploy plan rollback validate advise status schedule unschedule monitoring \
        sandbox-up sandbox-down preflight clear-caches prefetch clean compare-engines

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(VENV)/.stamp: requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements.lock
	# The toolkit itself, editable: its commands (spec-check, gpu-doctor, ...) land in $(BIN).
	$(BIN)/pip install -q --disable-pip-version-check --no-deps -e .
	touch $@

.apt-stamp: Makefile
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then echo "apt: installing $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi
	@touch $@

prefetch: $(VENV)/.stamp ## download the pinned wheels into the cache (once)
	$(BIN)/python -m specdeploy.controller.wheelhouse --cache $(CACHE)

setup: $(VENV)/.stamp .apt-stamp prefetch ## venv, apt packages and cached downloads

lint: $(VENV)/.stamp ## ansible-lint (production), yamllint strict, ruff check and format, ansible-test sanity
	$(BIN)/yamllint --strict .
	$(BIN)/ansible-lint --profile production --offline -q
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	VENV=$(CURDIR)/$(VENV) scripts/sanity.sh

collection: $(VENV)/.stamp ## build the collection tarball into build/ (ansible-galaxy collection install it)
	$(BIN)/ansible-galaxy collection build --force --output-path build

# The set-up steps run in parallel: on a fresh machine (CI's every run) the apt packages, the venv
# with the downloads after it, and the drafter's torch venv each wait on the network.
test: ## every test CI runs: lint, unit, patches on real wheels, sandbox integration (in parallel sessions)
	@$(MAKE) --no-print-directory -j4 --output-sync=target setup drafter-venv
	$(BIN)/python -m scripts.run_tests -- $(PYTEST_ARGS)

test-faults: setup ## the fault-injection suite alone (part of make test; its groups in parallel)
	$(BIN)/python -m scripts.run_tests --only test_faults -- $(PYTEST_ARGS)

demo: setup ## boot a sandbox node, deploy, validate, roll back, show status
	$(BIN)/python -m testbed.demo

sandbox-up: setup ## boot NODES=N systemd-nspawn nodes on 127.0.k.1N (no GPU: replayed nvidia-smi, stand-in server), write inventory/sandbox[-k]/, stage the test models (k: SPECDEPLOY_SANDBOX_INSTANCE, default 0)
	@hosts=$$($(BIN)/python -m testbed.sandbox up --nodes $(NODES)); \
	$(PLAYBOOK) -i "$$hosts" tests/playbooks/stage-models.yml >/dev/null; \
	echo "sandbox ready (models staged): make deploy INVENTORY=$$(dirname "$${hosts#$(CURDIR)/}")"

sandbox-down: $(VENV)/.stamp ## stop instance k's nodes (SPECDEPLOY_SANDBOX_INSTANCE, default 0), remove its state; refused while a test session holds it
	$(BIN)/python -m testbed.sandbox down

# Ctrl-C during a deploy or rollback: ansible-playbook stops ("User interrupted execution", exit
# 99) and leaves the nodes where it was; playbooks/interrupted.yml then ends each one in a named,
# safe state (rolled back to what served before, kept, or said unvalidated; the dead run's lock
# given back) that `make status` shows. It gets the run's EXTRA too: the same root, service and
# balancer as the run it ends. A second Ctrl-C stops that too (the next run or
# `make status` still names the state). Its input is /dev/null: the interrupted ansible-playbook
# can leave the terminal's input non-blocking, which ansible-playbook refuses to start on.
INTERRUPTIBLE = rc=0; trap 'true' INT; $(PLAYBOOK) -i $(INVENTORY) $(PLAY_ARGS) || rc=$$?; trap - INT; \
	if [ $$rc -eq 99 ]; then \
	  echo "make: the run was interrupted; ending what it left on each node (playbooks/interrupted.yml)" >&2; \
	  $(PLAYBOOK) -i $(INVENTORY) playbooks/interrupted.yml $(EXTRA) </dev/null || true; fi; \
	exit $$rc

deploy: PLAY_ARGS = deploy.yml $(EXTRA)
deploy: $(VENV)/.stamp ## ansible-playbook deploy.yml (INVENTORY=, EXTRA=); Ctrl-C ends in a named, safe state
	@$(INTERRUPTIBLE)

DRAFTER_CONFIG ?= $(INVENTORY)/drafter-pipeline.yml
drafter: $(VENV)/.stamp ## train the EAGLE-3 drafter for the served target (DRAFTER_CONFIG=; resumable)
	$(BIN)/python -m specdeploy.controller.drafter_pipeline run --config $(DRAFTER_CONFIG)

DRAFTER_VENV := $(CACHE)/venvs/drafter-torch
drafter-venv: $(DRAFTER_VENV)/.stamp ## CPU torch for the drafter pipeline's training tests (tests/unit/test_drafter_training.py)
$(DRAFTER_VENV)/.stamp: requirements-drafter-cpu.txt
	$(PYTHON) -m venv $(DRAFTER_VENV)
	$(DRAFTER_VENV)/bin/pip install -q --disable-pip-version-check -r requirements-drafter-cpu.txt
	touch $@

plan: $(VENV)/.stamp ## per node: the release a deploy would build, restart, downtime, gates; read-only (INVENTORY=, EXTRA=)
	$(PLAYBOOK) -i $(INVENTORY) playbooks/plan.yml $(EXTRA)

preflight: $(VENV)/.stamp ## read-only hardware and input checks (INVENTORY=, EXTRA=)
	$(PLAYBOOK) -i $(INVENTORY) playbooks/preflight.yml $(EXTRA)

rollback: PLAY_ARGS = playbooks/rollback.yml $(if $(TO),-e rollback_to=$(TO)) $(EXTRA)
rollback: $(VENV)/.stamp ## back to the previous release, or TO=<release-id> (INVENTORY=, EXTRA=)
	@$(INTERRUPTIBLE)

advise: $(VENV)/.stamp ## k advisor: predicted speed-up per k and concurrency from the serving nodes, no restart (INVENTORY=, EXTRA=)
	$(PLAYBOOK) -i $(INVENTORY) playbooks/advise.yml $(EXTRA)

# NODE= the one node; COMPARE_SET='sglang={"specdeploy_drafter_path": "..."}' extra vars for one
# engine's deploy (repeat --set in COMPARE_ARGS for more); LOAD_PROFILE=1=0.5,16=0.5.
NODE         ?=
COMPARE_KEEP ?= before
COMPARE_ARGS ?=
compare-engines: $(VENV)/.stamp ## on NODE=: deploy vLLM, then SGLang, print both per level and the winner at the load mix; COMPARE_KEEP=winner keeps it, else what served before
	@[ -n "$(NODE)" ] || { echo "make compare-engines: give NODE=<inventory host>" >&2; exit 2; }
	$(BIN)/python -m specdeploy.controller.compare_engines run -i $(INVENTORY) --node $(NODE) --keep $(COMPARE_KEEP) \
	  $(if $(LOAD_PROFILE),--load-profile $(LOAD_PROFILE)) $(if $(COMPARE_SET),--set '$(COMPARE_SET)') $(COMPARE_ARGS) -- $(EXTRA)

validate: $(VENV)/.stamp ## checks, gates, reports in reports/; exit 0 pass, 1 failed, 2 not measured (INVENTORY=, EXTRA=)
	@f=$$(mktemp); rc=0; $(PLAYBOOK) -i $(INVENTORY) playbooks/validate.yml -e validation_exit_file=$$f $(EXTRA) || rc=$$?; \
	code=$$(cat $$f 2>/dev/null); rm -f $$f; [ -n "$$code" ] || code=2; [ $$rc -eq 0 ] || [ $$code -ne 0 ] || code=2; \
	[ $$code -eq 0 ] || echo "make validate: exit $$code ($$([ $$code -eq 1 ] && echo 'a check, gate or regression failed' || echo 'could not measure'))" >&2; \
	exit $$code

status: $(VENV)/.stamp ## one table: node, release, engine, patch state, service, last validation (-e status_json_file=F: as JSON)
	$(PLAYBOOK) -i $(INVENTORY) playbooks/status.yml $(EXTRA)

clear-caches: $(VENV)/.stamp ## remove the compile caches of the current release (INVENTORY=)
	$(PLAYBOOK) -i $(INVENTORY) playbooks/clear-caches.yml $(EXTRA)

schedule: $(VENV)/.stamp ## install the validation timer on the controller (INVENTORY=, EXTRA=)
	$(PLAYBOOK) -i $(INVENTORY) playbooks/schedule.yml $(EXTRA)

monitoring: $(VENV)/.stamp ## Prometheus targets + alert rules, Grafana dashboard (roles/monitoring; INVENTORY=, EXTRA=)
	$(PLAYBOOK) -i $(INVENTORY) playbooks/monitoring.yml $(EXTRA)

unschedule: $(VENV)/.stamp ## remove the validation timer (history and reports stay)
	$(PLAYBOOK) -i $(INVENTORY) playbooks/unschedule.yml $(EXTRA)

BENCH_ARGS  ?=
bench: setup ## deploy/no-op/rollback wall times on 1, 2, 4 sandbox nodes -> docs/bench.md (BENCH_ARGS=)
	$(BIN)/python -m testbed.bench $(BENCH_ARGS)

clean: ## remove the venv, stamps and generated inventory (keeps the download cache)
	-$(BIN)/python -m testbed.sandbox down 2>/dev/null
	rm -rf $(VENV) .apt-stamp $(SANDBOX_INV) .pytest_cache .ruff_cache build
