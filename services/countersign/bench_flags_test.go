package main

import (
	"flag"
	"io"
	"slices"
	"testing"
)

// bench -fleet measures a lazy store unless -sync is given, and then the
// stores it names; a mode the bench does not know is refused.
func TestFleetModesFollowTheSyncFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"lazy"}},
		{[]string{"-sync", "both"}, []string{"lazy", "always"}},
		{[]string{"-sync", "all"}, []string{"lazy", "always", "cluster"}},
		{[]string{"-sync", "cluster"}, []string{"cluster"}},
		{[]string{"-sync", "always"}, []string{"always"}},
	} {
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		mode := fs.String("sync", "both", "")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		got, err := fleetModes(fs, *mode)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%v: modes %v, %v; want %v", tc.args, got, err, tc.want)
		}
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	mode := fs.String("sync", "both", "")
	if err := fs.Parse([]string{"-sync", "fast"}); err != nil {
		t.Fatal(err)
	}
	if _, err := fleetModes(fs, *mode); err == nil {
		t.Error("-sync fast was accepted")
	}
}
