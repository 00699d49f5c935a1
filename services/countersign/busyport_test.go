package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
)

// TestBusyPortsNameTheFlagThatMovesThem: when the API's or the embedded NATS
// server's address is taken, serve says which flag (and which make run
// variable) chooses another.
func TestBusyPortsNameTheFlagThatMovesThem(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	for _, tt := range []struct {
		name string
		args []string
		want []string
	}{
		{"api", []string{"--addr", addr, "--nats-listen", "off"}, []string{"--addr", "ADDR="}},
		{"nats", []string{"--addr", "127.0.0.1:0", "--nats-listen", addr}, []string{"--nats-listen", "NATS="}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := cmdServe(append([]string{"--data", t.TempDir()}, tt.args...), &out)
			if err == nil {
				t.Fatal("serve started on a taken address")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}
