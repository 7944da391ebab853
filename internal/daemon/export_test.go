package daemon

import "github.com/ucmd/ucmd/hw/sim"

// SimFabric is a --fabric sim daemon's fabric, for tests to act on.
func (d *Daemon) SimFabric() *sim.Fabric { return d.fabric }
