# Two commands do all the set-up on a fresh machine:
#   make demo   verify an example kernel (creates .venv on first use)
#   make test   run the whole test suite (what CI runs)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test test-long test-differential wheel bench spin chromium clean

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

# SPIN (the Promela tests' model checker) is installed when it can be: as root, with apt and a
# network. Otherwise (no network, not root) those tests skip and say why; nothing else needs it.
spin:
	@command -v spin >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && timeout 120 apt-get update -qq && timeout 300 apt-get install -y -qq spin; } >/dev/null 2>&1 \
	  || echo "make: SPIN is not installed (needs root, apt and a network): the Promela tests skip;" \
	     "install it with 'apt-get install spin'"

# Chromium (headless) draws the HTML report in its test, offline; installed the same way as SPIN,
# else that test skips and says why.
chromium:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && timeout 120 apt-get update -qq && timeout 600 apt-get install -y -qq chromium; } >/dev/null 2>&1 \
	  || echo "make: Chromium is not installed (needs root, apt and a network): the HTML rendering test" \
	     "skips; install it with 'apt-get install chromium'"

# Two workers (pytest-xdist), one per core of a CI machine; a file's tests stay on one worker, so a
# module's shared fixture (the examples it verifies) is computed once.
test: $(STAMP) spin chromium
	$(PY) -m pytest -q -n 2 --dist loadfile

test-long: $(STAMP) spin chromium
	SEMCHECK_PROFILE=ci-long $(PY) -m pytest -q -m "slow or not slow"

# The differential suite against jax's real threaded manager under the long profile (larger
# generated programs; about 15 minutes on two workers): what a change of the semantics must pass.
test-differential: $(STAMP)
	SEMCHECK_PROFILE=ci-long $(PY) -m pytest -q -n 2 --dist loadfile -m "slow or not slow" tests/differential

# A wheel to install semcheck from (dist/), for a team's CI or a machine without this checkout.
wheel: $(STAMP)
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation -w dist .
	@ls dist/*.whl

bench: $(STAMP) spin
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
