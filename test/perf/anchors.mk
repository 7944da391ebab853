# test/perf/anchors.mk — the performance harness's C programs, included from
# the top-level Makefile. test/perf/run.sh, ab.sh and trace.sh build what
# they use through it (make -B BIN=<their output folder> <program>...), so
# each program is compiled one way. -B rebuilds every time, as the scripts
# did before, so that a changed compiler or library is always picked up.
# The scripts pass $CC, if set, as PERF_CC. Needs gcc, libfuse3-dev,
# librdmacm-dev and libibverbs-dev (make vm-setup installs them).

PERF_CC ?= gcc
PERF_CFLAGS ?= -O2 -Wall -Wextra -Werror

$(BIN)/cusefloor: test/perf/cusefloor.c
	@mkdir -p $(BIN)
	$(PERF_CC) $(PERF_CFLAGS) -o $@ $< $$(pkg-config --cflags --libs fuse3)

$(BIN)/cmdbench: test/perf/cmdbench.c test/perf/guestcpu.h
	@mkdir -p $(BIN)
	$(PERF_CC) $(PERF_CFLAGS) -pthread -o $@ $<

$(BIN)/rdmaconn: test/perf/rdmaconn.c test/perf/guestcpu.h
	@mkdir -p $(BIN)
	$(PERF_CC) $(PERF_CFLAGS) -o $@ $< -lrdmacm -libverbs

$(BIN)/umadping: test/perf/umadping.c test/perf/guestcpu.h
	@mkdir -p $(BIN)
	$(PERF_CC) $(PERF_CFLAGS) -o $@ $<

$(BIN)/nothp: test/perf/nothp.c
	@mkdir -p $(BIN)
	$(PERF_CC) $(PERF_CFLAGS) -o $@ $<
