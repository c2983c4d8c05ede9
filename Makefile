# Two commands do all the set-up on a fresh machine:
#   make demo   verify an example kernel (creates .venv on first use)
#   make test   run the whole test suite (what CI runs)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test test-long bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || "$$(.ci/python312)" -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@rm -f $(VENV)/.installed-* && touch $@

demo: $(STAMP)
	$(VENV)/bin/semcheck verify examples/ring_allreduce.py --devices 2,4,8 --dma-mode all; \
	status=$$?; echo "semcheck exit code: $$status"; \
	$(VENV)/bin/semcheck verify examples/buggy/fixed_id_collision.py --devices 2; \
	echo "semcheck exit code on a buggy kernel: $$? (1 = violation found)"; exit $$status

test: $(STAMP)
	$(PY) -m pytest -q

test-long: $(STAMP)
	SEMCHECK_PROFILE=ci-long $(PY) -m pytest -q -m "slow or not slow"

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	@command -v spin >/dev/null || { apt-get update -qq && apt-get install -y -qq spin; } || echo "no SPIN: its column reads n/a"
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
