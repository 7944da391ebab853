package ucm_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cuse"
	"github.com/ucmd/ucmd/cuse/callermem"
	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/ucm"
)

// How the daemon serves /dev/infiniband/ucmN for each RDMA device: one CM
// per device, one IDTable for the whole daemon, one CUSE server per device.
// (Not run: registering a CUSE device needs root and /dev/cuse.)
func Example() {
	var devs []hw.Device // from hw/umad discovery
	ids := ucm.NewIDTable()
	for n, hd := range devs {
		cm := cmcore.New(hd, cmcore.Options{})
		if err := cm.Start(); err != nil {
			slog.Error("CM", "dev", hd.Name(), "err", err) // e.g. ib_cm loaded
			continue
		}
		dev, err := ucm.New(ucm.Config{CM: cm, Memory: callermem.ProcessVM{}, IDs: ids})
		if err != nil {
			panic(err)
		}
		srv, err := cuse.Open(context.Background(), cuse.Config{
			DevName: fmt.Sprintf("infiniband/ucm%d", n),
			Major:   231, Minor: 224 + uint32(n),
		}, dev)
		if err != nil {
			panic(err)
		}
		go srv.Serve()
	}
}
