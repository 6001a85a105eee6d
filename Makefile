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

KATEX_VERSION ?= 0.16.47

.PHONY: docs-check figures katex

katex:              ## the npm katex package into build/node (the docs site and the formula test use it)
	npm install --prefix build/node --no-save --no-audit --no-fund katex@$(KATEX_VERSION)

docs:               ## pages from the registry (+ KaTeX copied in), then the site: mkdocs build --strict
	$(PYTHON) -m qed docs
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict

docs-check:         ## the generated pages under docs/ must match what the registry renders now
	$(PYTHON) -m qed docs --check

figures:            ## docs/figures/*.png (saturation; training curves and attention of the newest run)
	$(PYTHON) -m qed.figures $(if $(RUN),--run $(RUN),)

clean:
	rm -rf runs site .pytest_cache .hypothesis
