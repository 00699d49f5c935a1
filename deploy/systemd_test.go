package deploy_test

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// unitFile is a parsed systemd unit: section → key → values (a key may be
// given more than once).
type unitFile map[string]map[string][]string

func parseUnit(t *testing.T, path string) unitFile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			if u[section] != nil {
				t.Errorf("%s:%d: section [%s] twice", path, n, section)
			}
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" || strings.HasSuffix(line, "\\") {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", path, n, line)
			}
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// get returns the last value of key in section (the one systemd uses).
func (u unitFile) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// hardening every unit must set, with the value it must have.
var hardening = map[string]string{
	"NoNewPrivileges":       "yes",
	"ProtectSystem":         "strict",
	"ProtectHome":           "yes",
	"PrivateTmp":            "yes",
	"PrivateDevices":        "yes",
	"ProtectKernelTunables": "yes",
	"ProtectKernelModules":  "yes",
	"ProtectControlGroups":  "yes",
	"RestrictSUIDSGID":      "yes",
	"RestrictNamespaces":    "yes",
	"LockPersonality":       "yes",
	"CapabilityBoundingSet": "",
	"DynamicUser":           "yes",
	"UMask":                 "0077",
}

func checkUnitCommon(t *testing.T, path string, u unitFile) {
	t.Helper()
	for _, s := range []string{"Unit", "Service", "Install"} {
		if u[s] == nil {
			t.Errorf("%s: no [%s] section", path, s)
		}
	}
	if got := u.get("Service", "Restart"); got != "on-failure" {
		t.Errorf("%s: Restart=%q, want on-failure", path, got)
	}
	for k, want := range hardening {
		if _, ok := u["Service"][k]; !ok {
			t.Errorf("%s: no %s=", path, k)
		} else if got := u.get("Service", k); got != want {
			t.Errorf("%s: %s=%q, want %q", path, k, got, want)
		}
	}
	if u.get("Service", "StateDirectory") == "" {
		t.Errorf("%s: no StateDirectory (ProtectSystem=strict leaves nothing else writable)", path)
	}
	if !strings.Contains(u.get("Install", "WantedBy"), "multi-user.target") {
		t.Errorf("%s: not WantedBy=multi-user.target", path)
	}
	// Secrets come from an EnvironmentFile, never from the unit itself.
	if len(u["Service"]["EnvironmentFile"]) == 0 {
		t.Errorf("%s: no EnvironmentFile for the secrets", path)
	}
	for _, e := range u["Service"]["Environment"] {
		if secretKey.MatchString(e) {
			t.Errorf("%s: Environment=%s: secrets belong in the EnvironmentFile", path, e)
		}
	}
}

func TestSystemdCountersignUnit(t *testing.T) {
	path := filepath.Join("systemd", "countersign@.service")
	u := parseUnit(t, path)
	checkUnitCommon(t, path, u)
	exec := strings.Fields(u.get("Service", "ExecStart"))
	if len(exec) < 2 || filepath.Base(exec[0]) != "countersign" || exec[1] != "serve" {
		t.Fatalf("%s: ExecStart %q is not countersign serve", path, exec)
	}
	flag := func(name string) string {
		i := slices.Index(exec, name)
		if i < 0 || i+1 >= len(exec) {
			return ""
		}
		return exec[i+1]
	}
	if flag("--roles") != "%i" {
		t.Errorf("%s: --roles %q, want %%i (the instance is the role)", path, flag("--roles"))
	}
	if flag("--config") == "" {
		t.Errorf("%s: no --config", path)
	}
	if d := flag("--data"); d != "${STATE_DIRECTORY}" {
		t.Errorf("%s: --data %q, want ${STATE_DIRECTORY}, the only writable directory", path, d)
	}
	if slices.Contains(exec, "--nats-url") {
		t.Errorf("%s: --nats-url would show the NATS password in ps; set COUNTERSIGN_NATS_URL in the EnvironmentFile", path)
	}
	if ef := u.get("Service", "EnvironmentFile"); !strings.Contains(ef, "%i") {
		t.Errorf("%s: EnvironmentFile %q is not per role (%%i): each role has its own NATS user", path, ef)
	}
	if !strings.Contains(u.get("Service", "StateDirectory"), "%i") {
		t.Errorf("%s: StateDirectory is shared by the roles", path)
	}
	if !strings.Contains(u.get("Unit", "After"), "nats-server.service") {
		t.Errorf("%s: not After=nats-server.service", path)
	}
}

func TestSystemdNATSUnit(t *testing.T) {
	path := filepath.Join("systemd", "nats-server.service")
	u := parseUnit(t, path)
	checkUnitCommon(t, path, u)
	exec := strings.Fields(u.get("Service", "ExecStart"))
	if len(exec) < 3 || filepath.Base(exec[0]) != "nats-server" || exec[1] != "-c" {
		t.Fatalf("%s: ExecStart %q is not nats-server -c FILE", path, exec)
	}
	// The node configs keep their JetStream store under the unit's state
	// directory, the only place ProtectSystem=strict lets it write.
	setPasswords(t)
	for _, node := range clusterNodes {
		o := loadNode(t, node)
		if !strings.HasPrefix(o.StoreDir, "/var/lib/"+u.get("Service", "StateDirectory")+"/") {
			t.Errorf("%s: store_dir %s is not under StateDirectory=%s of %s", node, o.StoreDir, u.get("Service", "StateDirectory"), path)
		}
	}
	if u.get("Service", "LimitNOFILE") == "" {
		t.Errorf("%s: no LimitNOFILE", path)
	}
}
