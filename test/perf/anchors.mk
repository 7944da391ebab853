# test/perf/anchors.mk — the performance harness's C programs, included from
# the top-level Makefile. test/perf/run.sh, ab.sh and trace.sh build what
# they use through it (make -B BIN=<their output folder> <program>..., or
# perf-anchors for all of them), so each program is compiled one way. -B
# rebuilds every time, as the scripts did before, so that a changed
# compiler or library is always picked up.
# The scripts pass $CC, if set, as PERF_CC. Needs gcc, libfuse3-dev,
# librdmacm-dev and libibverbs-dev (make vm-setup installs them).

PERF_CC ?= gcc
PERF_CFLAGS ?= -O2 -Wall -Wextra -Werror
PERF_ANCHORS := cusefloor cmdbench rdmaconn umadping nothp

# What each program links with beyond libc.
$(BIN)/cusefloor: PERF_LIBS = $$(pkg-config --cflags --libs fuse3)
$(BIN)/cmdbench: PERF_LIBS = -pthread
$(BIN)/rdmaconn: PERF_LIBS = -lrdmacm -libverbs

# All of them, as make perf runs them.
.PHONY: perf-anchors
perf-anchors: $(addprefix $(BIN)/,$(PERF_ANCHORS))

$(addprefix $(BIN)/,$(PERF_ANCHORS)): $(BIN)/%: test/perf/%.c test/perf/guestcpu.h
	@mkdir -p $(BIN)
	$(PERF_CC) $(PERF_CFLAGS) -o $@ $< $(PERF_LIBS)
