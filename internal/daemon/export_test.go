package daemon

import (
	"context"

	"github.com/ucmd/ucmd/hw/sim"
)

// SimFabric is a --fabric sim daemon's fabric, for tests to act on.
func (d *Daemon) SimFabric() *sim.Fabric { return d.fabric }

// Rescan looks at the devices once, as the Config.Rescan goroutine does.
func (d *Daemon) Rescan() { d.rescan(context.Background()) }
