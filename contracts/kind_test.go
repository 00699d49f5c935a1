package contracts_test

import (
	"testing"

	"github.com/countersign/countersign/contracts"
)

// A value is owned when it is of the kind, in any version, and names its
// owner; the NATS server's answers, other kinds and other owners are not.
func TestOwnedTellsTheWritersValuesFromOthers(t *testing.T) {
	for _, c := range []struct {
		data string
		want bool
	}{
		{`{"spec":"countersign.push-devices/v1","person":"alice","devices":[]}`, true},
		{`{"spec":"countersign.push-devices/v2","person":"alice"}`, true},
		{`{"spec":"countersign.push-devices/v1","person":"bob"}`, false},
		{`{"spec":"countersign.push-devices/v1"}`, false},
		{`{"spec":"countersign.passkeys/v1","person":"alice"}`, false},
		{`{"spec":"countersign.push-devices-x/v1","person":"alice"}`, false},
		{`{"type":"io.nats.jetstream.api.v1.stream_info_response","total":0}`, false},
		{`{"spec":7,"person":"alice"}`, false},
		{`[1,2]`, false},
		{`not json`, false},
	} {
		if got := contracts.Owned([]byte(c.data), contracts.SpecPushDevices, "person", "alice"); got != c.want {
			t.Errorf("Owned(%s) = %v, want %v", c.data, got, c.want)
		}
	}
	if !contracts.Owned([]byte(`{"spec":"countersign.passkey-party/v3"}`), contracts.SpecPasskeyParty, "", "") {
		t.Error("a value without an owner field is owned by its kind alone")
	}
}
