package daemon

import (
	"context"

	"github.com/ucmd/ucmd/hw/sim"
	"github.com/ucmd/ucmd/hw/umad"
)

// SimFabric is a --fabric sim daemon's fabric, for tests to act on.
func (d *Daemon) SimFabric() *sim.Fabric { return d.fabric }

// Rescan looks at the devices once, as the Config.Rescan goroutine does.
func (d *Daemon) Rescan() { d.rescan(context.Background(), false) }

// RescanForced is Rescan with a full look, as after a port stopped.
func (d *Daemon) RescanForced() { d.rescan(context.Background(), true) }

// FullLooks counts the rescans that read every device (hotplug.go's look).
// Only with Config.Rescan 0: the rescans are the test's.
func (d *Daemon) FullLooks() int64 { return d.last.full }

const FullLookEvery = fullLookEvery

// UMADOptions are the umad options the daemon runs with, defaults filled.
func (d *Daemon) UMADOptions() umad.Options { return d.cfg.UMAD }

const UMADQueueLen = umadQueueLen
