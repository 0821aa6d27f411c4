package link

import (
	"net"
	"testing"
)

// Ranks above 0 of a multi-host group bind the address they advertise, not every interface.
func TestListenAddr_bindsAdvertised(t *testing.T) {
	got, err := Config{Rank: 1, MasterAddr: "192.0.2.7:29500", AdvertiseAddr: "198.51.100.3:0"}.ListenAddress()
	if err != nil || got != "198.51.100.3:0" {
		t.Fatalf("with AdvertiseAddr: %q, %v", got, err)
	}
	var own net.IP
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			own = n.IP
			break
		}
	}
	if own == nil {
		t.Skip("no non-loopback IPv4 address here")
	}
	// Rank 0 on this host's own address: the route to it leaves from that address.
	got, err = Config{Rank: 1, MasterAddr: net.JoinHostPort(own.String(), "29500")}.ListenAddress()
	if err != nil || got != net.JoinHostPort(own.String(), "0") {
		t.Fatalf("route to %s: %q, %v", own, got, err)
	}
	if got, _ := (Config{Rank: 1, MasterAddr: "127.0.0.1:29500"}).ListenAddress(); got != "127.0.0.1:0" {
		t.Fatalf("loopback: %q", got)
	}
}
