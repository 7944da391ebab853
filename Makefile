# ucmd — build, test and run. `make check` is what CI runs (.ci/run).

GO        ?= go
BIN       := bin
PKGS      := ./...
FUZZTIME  ?= 10s
BENCHTIME ?= 1s
BENCHCOUNT ?= 6

export CGO_ENABLED ?= 0

# Every build, test and tool runs on Go 1.27.3, whichever go command starts
# it: the go command fetches that toolchain through the module proxy once
# (about 76 MB). The Go 1.26.8 of our machines has advisories that ucmd's
# code reaches, in net/http under the metrics endpoint (make vulncheck).
# GOTOOLCHAIN=local builds with the machine's own Go.
export GOTOOLCHAIN ?= go1.27.3

.PHONY: all build test race vet vulncheck fmt fmtcheck fuzz bench vm-setup vm-selftest vm-bench e2e e2e-bench trace-check check run clean

all: build

# make check's stages share two CPUs, one VM at a time and the apt lock of
# vm-setup: a -j from MAKEFLAGS would run them at once.
.NOTPARALLEL:

build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -o $(BIN)/ucmd ./cmd/ucmd

# Unit tests: no root, no /dev/cuse, no RDMA. The race detector needs cgo.
test:
	CGO_ENABLED=1 $(GO) test -race -count=1 $(PKGS)

# staticcheck (honnef.co/go/tools) at a pinned version, built by `go run`
# from the Go module proxy on first use (then from the build cache).
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags e2e ./test/e2e/
	$(GO) vet -tags tshark ./test/tshark/
	$(GO) vet -tags interop ./test/interop/
	$(STATICCHECK) $(PKGS)
	$(STATICCHECK) -tags e2e ./test/e2e/
	$(STATICCHECK) -tags tshark ./test/tshark/
	$(STATICCHECK) -tags interop ./test/interop/
	@if command -v shellcheck >/dev/null; then \
		shellcheck -x test/vm/*.sh test/interop/*.sh test/clients/*.sh test/perf/run.sh test/perf/trace.sh test/perf/ab.sh .ci/run .ci/vulncheck .ci/fuzz-smoke && shellcheck -x -s sh test/vm/init test/perf/guest.sh test/perf/trace-guest.sh test/perf/ab-guest.sh test/perf/guest-lib.sh; \
	else echo "vet: shellcheck not installed (make vm-setup installs it): scripts not checked"; fi

# Known vulnerabilities that ucmd's code reaches (govulncheck, pinned), in
# its modules and in the toolchain's standard library, against a pinned
# snapshot of the Go vulnerability database (.ci/vulncheck; VULNDB=URL for
# another, e.g. https://vuln.go.dev).
vulncheck:
	@./.ci/vulncheck

fmt:
	gofmt -w $$(git ls-files '*.go')

# gofmt of the toolchain that builds (GOTOOLCHAIN), on the files git
# tracks; no file list (git missing, or refusing a clone another user owns)
# is a failure, not a check of nothing.
fmtcheck:
	@files=$$(git ls-files '*.go') && [ -n "$$files" ] || { echo "fmtcheck: no Go files from git ls-files"; exit 1; }; \
	out=$$("$$($(GO) env GOROOT)/bin/gofmt" -l $$files) || exit 1; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# A bounded smoke run of every Fuzz target in the tree (FUZZTIME each).
fuzz:
	@./.ci/fuzz-smoke $(FUZZTIME)

bench:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) -count=$(BENCHCOUNT) $(PKGS)

# The tests of the packages that speak a byte order on a big-endian host:
# s390x (RoCE on IBM Z) under qemu-user (make vm-setup installs it). The
# ucm ABI, FUSE and netlink structs are in the host's order, CM messages
# and umad's addresses big-endian. Skipped, what qemu-user does not
# emulate: process_vm_writev (cuse/callermem; two ucm tests) and an ioctl
# on a plain file (ENOSYS for ENOTTY).
CROSS_PKGS = ./abi/... ./cmcore/... ./cuse/cusetest ./cuse/internal/... ./hw/... ./ucm
CROSS_SKIP = ^(TestCommandAllocs|TestRefusalLoggedOutsideTheFileLock|TestFailedOpenMADClosesTheFile)$$
.PHONY: cross
cross:
	@command -v qemu-s390x >/dev/null || { echo "cross: qemu-s390x not installed (make vm-setup, as root)"; exit 1; }
	GOARCH=s390x $(GO) test -exec qemu-s390x -count=1 -skip '$(CROSS_SKIP)' $(CROSS_PKGS)

# The test VM (qemu + Debian's kernel, cached in .cache/vm/): installs with
# apt-get, so run it as root once; later runs are a quick no-op.
vm-setup:
	@./test/vm/setup.sh

# The harness's own contract (run.sh, run2.sh): nine short boots.
vm-selftest:
	@./test/vm/selftest.sh

# Boot-to-command and whole-run times of the guest over a few boots.
vm-bench:
	@./test/vm/bench.sh

# The real-kernel tests (test/e2e, tag e2e) inside the VM: /dev/cuse, umad and
# Soft-RoCE. Fails when the VM cannot run, unless E2E=skip (refused in CI).
e2e:
	@./test/vm/e2e.sh

# The same tests with ucmd built with the race detector (cgo), so the
# daemon's concurrency meets the real kernel's CUSE and umad under -race
# too; a daemon that saw a race exits 66 and the test that stops it fails.
.PHONY: e2e-race
e2e-race:
	@E2E_RACE=1 ./test/vm/e2e.sh

# tshark on the host on the capture of the last make e2e (TestTraceCapture;
# e2e.sh runs this itself after the guest), and on golden frames.
trace-check:
	$(GO) test -tags tshark -count=1 -v ./test/tshark/

# The e2e package's benchmarks, in the VM (real CUSE/umad round trips).
e2e-bench:
	@E2E_FLAGS='-test.run=^$$ -test.bench=. -test.benchmem -test.benchtime=$(BENCHTIME) -test.count=$(BENCHCOUNT)' \
		./test/vm/e2e.sh

# Wire interop with the kernel's own CM: two guests (run2.sh), kernel
# ib_cm/rdma_cm + librdmacm in A, cmcore over umad in B (test/interop).
.PHONY: interop interop-race
interop:
	@./test/interop/run.sh
interop-race:
	@INTEROP_RACE=1 ./test/interop/run.sh

# ucmd against its anchors in ONE boot of the test VM (docs/perf.md): the
# libfuse3 CUSE floor and the kernel's rdma_cm, alternating; a ratio table
# and bin/perf/perf.json. perf-check (in make check) is a short run that
# only checks every figure and the JSON are produced: no thresholds.
# perf-trace: where a MAD's time goes, from the kernel's tracepoints
# (bin/perf/trace/summary.txt). perf-ab BASE=REV: the working tree's daemon
# against REV's in one boot, taking turns (bin/perf-ab/). perf-check runs
# both short too.
.PHONY: perf perf-check perf-trace perf-ab
perf:
	@./test/perf/run.sh
perf-trace:
	@./test/perf/trace.sh
BASE ?=
perf-ab:
	@./test/perf/ab.sh "$(BASE)"
perf-check:
	@./test/perf/run.sh --short
	@./test/perf/trace.sh --short
	@./test/perf/ab.sh --short HEAD

# vm-setup first: on a fresh machine it installs what the later stages need
# (libibverbs-dev for the C client, shellcheck for vet, qemu and the guest
# kernel for e2e/interop); once done it is a one-second no-op. Not as root
# with packages missing, it stops at once and names them.
check: vm-setup fmtcheck vet vulncheck build test cross fuzz clients clients-selftest e2e e2e-race interop interop-race deb-test boot-test perf-check
	@echo "make check: all stages passed"

# The README's first command. With /dev/cuse (a real machine, as root): serve
# every RDMA device with umad ports; RUN_ARGS adds flags (e.g. --fabric sim).
# Without it (like our CI machines): boot the test VM and show ucmd serving
# rxe0/rxe1 with two legacy clients connecting through it (test/vm/demo.sh).
RUN_ARGS ?=
run: build
	@if [ -e /dev/cuse ]; then \
		echo "make run: $(BIN)/ucmd serve $(RUN_ARGS)  (stop with Ctrl-C)"; \
		exec $(BIN)/ucmd serve $(RUN_ARGS); \
	else \
		echo "make run: no /dev/cuse on this machine: running ucmd in the test VM (test/vm/demo.sh)"; \
		./test/vm/setup.sh && $(MAKE) --no-print-directory clients && \
		./test/vm/run.sh -r -- env UCMD_BIN=$(BIN)/ucmd UCMCLIENT_BIN=$(BIN)/ucmclient test/vm/demo.sh; \
	fi

clean:
	rm -rf $(BIN)

# The legacy C client (test/clients): `clients`, `clients-selftest`.
include test/clients/clients.mk
include test/perf/anchors.mk

# make pkg then make install (PREFIX, DESTDIR), make deb, make deb-test (the package in the VM).
include dist/install.mk
