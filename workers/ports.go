package workers

import "fmt"

// poolPorts holds the ports of one pool's launched workers.
type poolPorts struct {
	http []int // HTTP port of worker i
	side []int // side port of worker i; nil when the engine has none
}

// assignPorts gives every launched worker its HTTP port and, for pools
// with side ports (see hasSidePorts; simProtocol is the sim workers'
// protocol, "" when unknown), its side port, and checks that no two uses
// overlap. HTTP ports are assigned first, so a clash with a side port
// blames side_port_base. The pools' own fields must already be valid.
func assignPorts(pools []pool, simProtocol string) ([]poolPorts, error) {
	used := map[int]string{} // port -> the worker that uses it
	claim := func(port int, key, user string) error {
		if prev, taken := used[port]; taken {
			return fmt.Errorf("%s: %d already used by %s", key, port, prev)
		}
		used[port] = user
		return nil
	}
	out := make([]poolPorts, len(pools))
	for pi, p := range pools {
		if !p.cfg.launched() {
			continue
		}
		for i := 0; i < p.cfg.Count; i++ {
			port, key := p.cfg.BasePort+i, fmt.Sprintf("%s.base_port", p.key)
			if len(p.cfg.Ports) > 0 {
				port, _ = parsePort(p.cfg.Ports[i])
				key = fmt.Sprintf("%s.ports[%d]", p.key, i)
			} else {
				key += fmt.Sprintf(" (%s[%d])", p.key, i)
			}
			if err := claim(port, key, fmt.Sprintf("%s[%d]", p.key, i)); err != nil {
				return nil, err
			}
			out[pi].http = append(out[pi].http, port)
		}
	}
	for pi, p := range pools {
		if !p.cfg.launched() || !p.cfg.hasSidePorts(simProtocol) {
			continue
		}
		stride := p.cfg.sidePortStride()
		if err := portRange(p.cfg.SidePortBase, p.cfg.Count, stride); err != nil {
			return nil, fmt.Errorf("%s.side_port_base: %w", p.key, err)
		}
		for i := 0; i < p.cfg.Count; i++ {
			first := p.cfg.SidePortBase + i*stride
			for port := first; port < first+stride; port++ {
				key := fmt.Sprintf("%s.side_port_base (side port of %s[%d])", p.key, p.key, i)
				if err := claim(port, key, fmt.Sprintf("%s[%d] side port", p.key, i)); err != nil {
					return nil, err
				}
			}
			out[pi].side = append(out[pi].side, first)
		}
	}
	return out, nil
}
