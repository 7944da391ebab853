package daemon

import (
	"errors"
	"fmt"

	"github.com/ucmd/ucmd/hw/umad"
)

// PortAddress is how the first port of an RDMA device is reached: its GID
// at index 0 and its LID (0 on RoCE).
type PortAddress struct {
	GID [16]byte
	LID uint16
}

// FirstPort finds the first port of the RDMA device ibdev the way serve
// finds the devices it serves (umad's view of sysfs). `ucmd conformance`
// builds its loopback path from it: the CLI reaches the hardware only
// through the daemon's packages.
func FirstPort(ibdev string) (PortAddress, error) {
	return firstPort(umad.Options{}, ibdev)
}

func firstPort(opts umad.Options, ibdev string) (PortAddress, error) {
	devs, err := umad.Discover(opts)
	if err != nil {
		return PortAddress{}, err
	}
	for _, d := range devs {
		if d.Name() != ibdev || len(d.Ports()) == 0 {
			continue
		}
		a, err := d.Ports()[0].Attr()
		if err != nil {
			return PortAddress{}, err
		}
		for _, g := range a.GIDs {
			if g.Index == 0 {
				return PortAddress{GID: g.GID, LID: a.LID}, nil
			}
		}
		return PortAddress{}, errors.New("port 1 has no GID at index 0")
	}
	return PortAddress{}, fmt.Errorf("no RDMA device %q with umad ports", ibdev)
}
