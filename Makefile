# qed — make targets. `make demo` is the main job; `make test` is what CI runs.
PYTHON ?= python3

.PHONY: install prove codegen check test test-all demo train bench docs clean

install:            ## torch first (CPU wheel), then the project with its dev tools
	$(PYTHON) -m pip install torch==2.13.0
	$(PYTHON) -m pip install -e '.[dev]'

prove:              ## prove every claim, refute every mutant
	$(PYTHON) -m qed prove

codegen:            ## print generated/ from the proven expressions
	$(PYTHON) -m codegen

check:              ## generated/ must match what codegen renders now
	$(PYTHON) -m codegen --check

test:               ## the test suite (slow cross-checks excluded)
	$(PYTHON) -m pytest -q -n 2

test-all:           ## everything, slow cross-checks included
	$(PYTHON) -m pytest -q -n 2 -m ''

demo: prove codegen check  ## the main job: prove, generate, check, train on the built-in task
	$(PYTHON) -m qed train

train:
	$(PYTHON) -m qed train

clean:
	rm -rf runs site .pytest_cache .hypothesis
