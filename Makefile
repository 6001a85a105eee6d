# qed — make targets. `make demo` is the main job; `make test` is what CI runs.
PYTHON ?= python3
KATEX_VERSION ?= 0.16.47

.PHONY: help install prove audit codegen check lint format test test-all demo train train-torch train-text \
        bench katex docs docs-check figures clean

help:               ## this list: every target and what it does
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:[^#]*## /\t/' | \
	    awk -F '\t' '{ printf "  make %-12s %s\n", $$1, $$2 }'

install:            ## torch first (the CPU wheel), then the project with its dev and docs tools
	$(PYTHON) -m pip install torch==2.13.0
	$(PYTHON) -m pip install -e '.[dev,docs]'

prove:              ## prove every claim, refute every mutant, judge every printed line (reuses unchanged certificates)
	$(PYTHON) -m qed prove

audit:              ## mutation testing: every wrong edit of a printed expression refuted by a proof
	$(PYTHON) -m qed audit

codegen:            ## print generated/ from the proven expressions
	$(PYTHON) -m codegen

check:              ## generated/ and the generated docs pages must match what renders now
	$(PYTHON) -m codegen --check
	$(PYTHON) -m qed docs --check

lint:               ## ruff: lint and format check (configured in pyproject.toml)
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

format:             ## ruff: fix what can be fixed, format everything but generated/
	$(PYTHON) -m ruff check --fix .
	$(PYTHON) -m ruff format .

test:               ## the test suite (slow cross-checks excluded)
	$(PYTHON) -m pytest -q -n 2 --dist loadgroup

test-all:           ## everything, slow cross-checks included
	$(PYTHON) -m pytest -q -n 2 --dist loadgroup -m ''

demo: prove codegen check train  ## the main job: prove, generate, check, train on the built-in task

train:              ## the NumPy GPT on the built-in sorting task (>= 99% held-out accuracy)
	$(PYTHON) -m qed train

train-torch:        ## the same with the generated PyTorch kernels
	$(PYTHON) -m qed train --backend torch

train-text:         ## character-level LM on a text file: make train-text DATA=path/to/input.txt
	$(PYTHON) -m qed train --data $(DATA)

bench:              ## NumPy and generated-PyTorch training steps side by side against PyTorch eager
	$(PYTHON) -m qed bench

KATEX := build/node/node_modules/katex/package.json

katex: $(KATEX)     ## the npm katex package into build/node (the docs site and the formula test use it)

$(KATEX):
	npm install --prefix build/node --no-save --no-audit --no-fund katex@$(KATEX_VERSION)

docs: $(KATEX)      ## pages from the registry (+ KaTeX copied in), then the site: mkdocs build --strict
	$(PYTHON) -m qed docs
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict

docs-check:         ## the generated pages under docs/ must match what the registry renders now
	$(PYTHON) -m qed docs --check

figures:            ## docs/figures/*.png (saturation; training curves and attention of the newest run)
	$(PYTHON) -m qed.tools.figures $(if $(RUN),--run $(RUN),)

clean:
	rm -rf runs site build .pytest_cache .hypothesis
