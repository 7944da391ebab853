package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/cmcore/wire"
)

// madKey is one series of ucmd_mads_total.
type madKey struct {
	device string
	port   int
	typ    uint16 // attribute id; 0: other
	dir    cmcore.MADDirection
}

// WantsTime implements cmcore.TimeObserver: the counters need no time.
func (m *Metrics) WantsTime() bool { return false }

// ObserveMAD implements cmcore.Observer: give m to every CM's
// Options.Observer (daemon.Config.Observers); ev.Device names the device.
func (m *Metrics) ObserveMAD(ev *cmcore.MADEvent) {
	k := madKey{port: ev.Port, typ: madType(ev), dir: ev.Dir}
	if ev.Device != nil {
		k.device = ev.Device.Name()
	}
	if c, ok := m.madCounters.Load(k); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c := m.mads.WithLabelValues(k.device, strconv.Itoa(k.port), madTypeNames[k.typ], k.dir.String())
	m.madCounters.Store(k, c)
	c.Inc()
}

// madType is the CM attribute of ev's MAD, 0 for one that is not a CM
// message: the label's values stay a fixed set, whatever the fabric sends.
func madType(ev *cmcore.MADEvent) uint16 {
	if ev.MAD == nil {
		return 0
	}
	h, err := wire.DecodeHeader(ev.MAD)
	if err != nil { // not a CM MAD
		return 0
	}
	if _, ok := madTypeNames[h.AttrID]; !ok {
		return 0
	}
	return h.AttrID
}

// madTypeNames are the values of the type label: the CM messages as
// wire.AttrName spells them, and "other".
var madTypeNames = func() map[uint16]string {
	m := map[uint16]string{0: "other"}
	for _, a := range []uint16{
		wire.AttrClassPortInfo, wire.AttrREQ, wire.AttrMRA, wire.AttrREJ, wire.AttrREP, wire.AttrRTU,
		wire.AttrDREQ, wire.AttrDREP, wire.AttrSIDRREQ, wire.AttrSIDRREP, wire.AttrLAP, wire.AttrAPR,
	} {
		m[a] = wire.AttrName(a)
	}
	return m
}()
