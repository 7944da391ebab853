// Package e2e holds ucmd's end-to-end tests: they run as root inside the
// project's test VM (Debian's kernel under qemu, see test/vm), where /dev/cuse
// and two Soft-RoCE devices exist, which the host kernel lacks.
//
// Every test file carries the build tag e2e, so `go test ./...` on the host
// compiles only this file. `make e2e` builds the tests on the host with
// `go test -c -tags e2e`, boots the VM with the RDMA setup of
// test/vm/guest-rdma.sh and runs the binary there, from this directory.
//
// The guest every test starts in:
//   - modules cuse, rdma_rxe, ib_umad and ib_uverbs loaded; ib_cm NOT loaded;
//   - rxe0 on veth0 (umad0, uverbs0; GID 0 fe80::ff:fe00:1) and rxe1 on veth1
//     (umad1, uverbs1; GID 0 fe80::ff:fe00:2); MADs between the two devices
//     travel only via these link-local GIDs;
//   - /dev/cuse and /dev/infiniband/{umad,uverbs}* mode 0666;
//   - UCMD_BIN names the ucmd binary built for this run; $UCMD_VM_SCRATCH is a
//     directory kept on the host after the run when `run.sh -o` is given.
//
// Adding a test: create <area>_test.go here starting with `//go:build e2e`,
// in package e2e, and use the helpers of guest_test.go (sysfs reads, modprobe
// with cleanup, umad registration). Tests share one kernel: one that loads a
// module or creates a device must undo it in t.Cleanup, and must not call
// t.Parallel. Run a subset with `make e2e E2E_FLAGS='-test.run=Smoke'`.
package e2e
