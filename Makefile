# nextflash build.
#
# Out-of-tree: everything goes under $(BUILD) (default build/). Header dependencies are tracked with
# -MMD -MP. The library is every C file under src/ except src/cuda/; programs are tools/<name>.c, each
# linked against the library. `make cuda` adds src/cuda/*.cu compiled by nvcc for sm_90a (it only needs the
# toolkit, not a GPU) and builds the programs again under $(BUILD)/cuda with NF_CUDA defined.
#
#   make            CPU build of the library and the programs
#   make cuda       CUDA build (compiles anywhere nvcc is installed)
#   make test       prerequisites, then C tests (Criterion), Python cross-checks (pytest), short fuzz run
#   make run        prerequisites, then a one-shot generation with the embedded default model
#   make qa         exactness tests + nf-score ladder of the embedded model vs the recorded baseline (docs/quality.md)
#   make fuzz       libFuzzer targets under $(BUILD)/fuzz (FUZZ_SECONDS=600 make fuzz-run for a long run)
#   make clean

BUILD   ?= build
CC      ?= cc
NVCC    ?= nvcc
PYTHON  ?= python3
WERROR  ?= $(if $(CI),-Werror,)
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
# PORTABLE=1 (make variable or environment): programs for another host — the GPU machine lacks some -dev packages
# and may have another CPU: generic x86-64-v3 code, pcre2/jansson/libedit and the CUDA runtime linked statically, unused
# shared libraries dropped (a bench or test binary then needs nothing but glibc and the driver there).
ifeq ($(PORTABLE),1)
MARCH   := -march=x86-64-v3
LDLIBS  += -Wl,--as-needed -lm -lpthread -Wl,-Bstatic -lpcre2-8 -ljansson -ledit -ltinfo -lbsd -lmd -Wl,-Bdynamic
CUDART  := -lcudart_static -ldl -lrt
else
MARCH   := -march=native
LDLIBS  += -lm -lpthread $(shell pkg-config --libs libpcre2-8 jansson 2>/dev/null || echo -lpcre2-8 -ljansson)
CUDART  := -lcudart -ldl
endif
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra $(WERROR) -pthread -fPIC -Isrc -MMD -MP $(MARCH) -fno-math-errno
EDIT_LIBS := $(shell pkg-config --libs libedit 2>/dev/null || echo -ledit)
LDLIBS  += $(EDIT_LIBS)
MHD_LIBS := $(shell pkg-config --libs libmicrohttpd 2>/dev/null || echo -lmicrohttpd)
LDLIBS  += $(MHD_LIBS)
NVFLAGS ?= -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Isrc --compiler-options -Wall,-Wextra -MMD -MP

LIB_SRC   := $(shell find src -name '*.c' -not -path 'src/cuda/*' | sort)
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
TOOL_SRC  := $(wildcard tools/*.c)
TOOLS     := $(TOOL_SRC:tools/%.c=$(BUILD)/%)
TEST_SRC  := $(wildcard tests/c/*.c)
TEST_OBJ  := $(TEST_SRC:%.c=$(BUILD)/%.o)
FUZZ_SRC  := $(wildcard fuzz/*.c)
FUZZERS   := $(FUZZ_SRC:fuzz/%.c=$(BUILD)/fuzz/%)
CU_SRC    := $(wildcard src/cuda/*.cu)
CU_OBJ    := $(CU_SRC:%.cu=$(BUILD)/cuda/%.o)
CUDA_TOOLS:= $(TOOL_SRC:tools/%.c=$(BUILD)/cuda/%)
CUDA_LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/cuda/%.o)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC) 2>/dev/null))

.PHONY: all cuda gpu-test test test-c test-py test-fuzz run deps fuzz fuzz-run clean qa
all: $(TOOLS) $(BUILD)/libnf.so $(BUILD)/nf-ab

# nf-ab (A/B harness) is a shell entry point, scripts/nf-ab (logic in scripts/ab/, docs/ab.md); the build dir gets
# a link to it so it sits beside the programs.
$(BUILD)/nf-ab: scripts/nf-ab
	@mkdir -p $(@D)
	ln -sf $(abspath scripts/nf-ab) $@

# the archive is made anew: `ar r` into an old one would keep the member of a source deleted or renamed since
$(BUILD)/libnf.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@
	$(AR) rcs $@ $^

# The shared library lets the Python cross-checks call our C code directly through ctypes.
$(BUILD)/libnf.so: $(LIB_OBJ)
	$(CC) -shared $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%: $(BUILD)/tools/%.o $(BUILD)/libnf.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# nf-bench's build stamp (src/bench/run_env.c prints it): commit, dirty flag, compilers and flags, in a generated
# header that is rewritten only when its content changes (an unchanged tree does not rebuild). STAMP_CFLAGS is
# expanded here, before the target-specific -I below, so the stamp shows the flags every object was built with.
BUILD_ID_H   := $(BUILD)/gen/nf_build_id.h
STAMP_CFLAGS := $(CFLAGS)
.PHONY: FORCE
FORCE:
$(BUILD_ID_H): FORCE
	@mkdir -p $(@D)
	@{ printf '#define NF_BUILD_COMMIT "%s"\n' "$$(git rev-parse HEAD 2>/dev/null || echo unknown)"; \
	   printf '#define NF_BUILD_DIRTY "%s"\n' "$$(git rev-parse HEAD >/dev/null 2>&1 && \
	     { git status --porcelain --untracked-files=no | grep -q . && echo yes || echo no; } || echo unknown)"; \
	   printf '#define NF_BUILD_CC "%s"\n' "$$($(CC) --version 2>/dev/null | head -n 1)"; \
	   printf '#define NF_BUILD_CFLAGS "%s"\n' '$(STAMP_CFLAGS)'; \
	   printf '#define NF_BUILD_NVCC "%s"\n' "$$($(NVCC) --version 2>/dev/null | tail -n 1)"; \
	   printf '#define NF_BUILD_NVFLAGS "%s"\n' '$(NVFLAGS)'; } >$@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(BUILD)/src/bench/run_env.o $(BUILD)/cuda/src/bench/run_env.o: $(BUILD_ID_H)
$(BUILD)/src/bench/run_env.o $(BUILD)/cuda/src/bench/run_env.o: CFLAGS += -I$(BUILD)/gen

# ---- CUDA -------------------------------------------------------------------------------------------
cuda: $(CUDA_TOOLS) $(BUILD)/cuda/nf-gpu-tests $(BUILD)/lab/iq2_dp4a

# Lab kernels (bench/lab/*.cu): standalone experiments, each one program with its own checks (see its header).
$(BUILD)/lab/%: bench/lab/%.cu src/formats/iq2_tables.c
	@mkdir -p $(@D)
	$(NVCC) $(filter-out -MMD -MP,$(NVFLAGS)) $^ -o $@ -lm

# GPU tests: tests/gpu/*.c, one binary (main.c calls each file's entry); `make gpu-test` runs it on a machine with a
# GPU (it converts the fixtures with $(BUILD)/cuda/nf-convert, so it needs the CUDA build of the tools).
GPU_TEST_SRC := $(wildcard tests/gpu/*.c)
$(BUILD)/cuda/nf-gpu-tests: $(GPU_TEST_SRC:%.c=$(BUILD)/cuda/%.o) $(BUILD)/cuda/libnf.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -L$(CUDA_HOME)/lib64 $(CUDART) -lstdc++

gpu-test: cuda
	NF_BUILD=$(BUILD)/cuda $(BUILD)/cuda/nf-gpu-tests

$(BUILD)/cuda/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DNF_CUDA -I$(CUDA_HOME)/include -c $< -o $@

$(BUILD)/cuda/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(BUILD)/cuda/libnf.a: $(CUDA_LIB_OBJ) $(CU_OBJ)
	rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/cuda/%: $(BUILD)/cuda/tools/%.o $(BUILD)/cuda/libnf.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -L$(CUDA_HOME)/lib64 $(CUDART) -lstdc++

# ---- tests ------------------------------------------------------------------------------------------
$(BUILD)/.deps-ok: scripts/install-deps.sh
	@mkdir -p $(@D)
	bash scripts/install-deps.sh
	@touch $@

deps: $(BUILD)/.deps-ok

$(BUILD)/nf-tests: $(TEST_OBJ) $(BUILD)/libnf.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lcriterion

test: deps
	$(MAKE) test-c test-py test-fuzz

test-c: $(BUILD)/nf-tests $(TOOLS)
	NF_BUILD=$(BUILD) $(BUILD)/nf-tests --jobs=2

test-py: $(TOOLS) $(BUILD)/libnf.so
	NF_BUILD=$(BUILD) $(PYTHON) -m pytest -q tests/py

# Quality gate (docs/quality.md): the exactness tests against transformers, then every recipe of the embedded model
# scored with nf-score on the whole reference set and checked against tests/data/score/baseline.json.
qa: deps $(TOOLS) $(BUILD)/libnf.so
	NF_BUILD=$(BUILD) $(PYTHON) -m pytest -q tests/py/test_forward.py tests/py/test_tiny_reference.py \
	  tests/py/test_quantize.py tests/py/test_score.py
	NF_BUILD=$(BUILD) $(PYTHON) scripts/qa_score.py --build $(BUILD)

# ---- fuzzing (clang + libFuzzer) --------------------------------------------------------------------
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -Isrc -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
$(BUILD)/fuzz/%: fuzz/%.c $(LIB_SRC)
	@mkdir -p $(@D)
	clang $(FUZZ_CFLAGS) $< $(LIB_SRC) -o $@ -lm -lpthread $(shell pkg-config --libs libpcre2-8 jansson 2>/dev/null) $(EDIT_LIBS) $(MHD_LIBS)

fuzz: $(FUZZERS)

FUZZ_SECONDS ?= 20
test-fuzz: $(FUZZERS)
	@for f in $(FUZZERS); do n=$$(basename $$f); mkdir -p $(BUILD)/fuzz/work-$$n; \
	  echo "fuzz $$n for $(FUZZ_SECONDS)s"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=0 -close_fd_mask=3 \
	      $(BUILD)/fuzz/work-$$n fuzz/corpus/$${n#fuzz_} >$(BUILD)/fuzz/$$n.log 2>&1 \
	      || { tail -40 $(BUILD)/fuzz/$$n.log; exit 1; }; done

fuzz-run: $(FUZZERS)
	$(MAKE) test-fuzz FUZZ_SECONDS=$(FUZZ_SECONDS)

# ---- the embedded default model ---------------------------------------------------------------------
run: deps all
	bash scripts/run-default.sh

clean:
	rm -rf $(BUILD)

.SECONDARY:
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
