package policy

import "testing"

// Every gate setting the file may name has a reader, and nothing else does.
func TestEveryGateKeyHasAReader(t *testing.T) {
	for _, k := range gateKeys {
		if gateFieldReaders[k] == nil {
			t.Errorf("gate setting %q has no reader", k)
		}
	}
	if len(gateFieldReaders) != len(gateKeys) {
		t.Errorf("%d readers for %d gate settings", len(gateFieldReaders), len(gateKeys))
	}
}
