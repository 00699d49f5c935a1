package deploy_test

import (
	"flag"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

func composeFile(t *testing.T) map[string]any {
	t.Helper()
	return yamlDocs(t, "compose.yaml")[0]
}

// composeNodes are the NATS services of compose.yaml, by name.
var composeNodes = []string{"n1", "n2", "n3"}

func TestComposeNATSNodes(t *testing.T) {
	pw := setPasswords(t)
	services := obj(composeFile(t), "services")
	var names []string
	for i, name := range composeNodes {
		svc := obj(services, name)
		if svc == nil {
			t.Errorf("no service %s", name)
			continue
		}
		if !strings.HasPrefix(str(svc, "image"), "nats:") {
			t.Errorf("%s: image %q is not the official nats image", name, str(svc, "image"))
		}
		// Map the container paths of the mounted files back to deploy/.
		mounts := map[string]string{}
		for _, v := range stringsOf(list(svc, "volumes")) {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 {
				mounts[parts[1]] = parts[0]
			}
		}
		args := stringsOf(list(svc, "command"))
		for j, a := range args {
			if host, ok := mounts[a]; ok && strings.HasPrefix(host, "./") {
				args[j] = host
			}
		}
		if !slices.Contains(args, "./"+clusterNodes[i]) {
			t.Errorf("%s: command %q does not load %s", name, args, clusterNodes[i])
		}
		if mounts["/etc/nats/accounts.conf"] != "./cluster/accounts.conf" {
			t.Errorf("%s: accounts.conf is not mounted next to the node config", name)
		}
		// nats-server's own flag parsing, config file included.
		fs := flag.NewFlagSet("nats-server", flag.ContinueOnError)
		o, err := server.ConfigureOptions(fs, args, func() {}, func() {}, func() {})
		if err != nil {
			t.Errorf("%s: nats-server %q: %v", name, args, err)
			continue
		}
		names = append(names, o.ServerName)
		if o.Host != "0.0.0.0" || o.Port != 4222 || o.Cluster.Host != "0.0.0.0" || o.Cluster.Port != 6222 {
			t.Errorf("%s: listens on %s:%d, cluster %s:%d; want 0.0.0.0:4222 and 0.0.0.0:6222", name, o.Host, o.Port, o.Cluster.Host, o.Cluster.Port)
		}
		var routes []string
		for _, r := range o.Routes {
			routes = append(routes, r.Host)
		}
		want := []string{"n1:6222", "n2:6222", "n3:6222"}
		if !slices.Equal(slices.Sorted(slices.Values(routes)), want) {
			t.Errorf("%s: routes %q, want %q", name, routes, want)
		}
		if !o.JetStream || !o.SyncAlways || o.Cluster.Name != "countersign" || !o.Cluster.NoAdvertise {
			t.Errorf("%s: jetstream %v, sync always %v, cluster %q, no_advertise %v", name, o.JetStream, o.SyncAlways, o.Cluster.Name, o.Cluster.NoAdvertise)
		}
		if _, ok := mounts[o.StoreDir]; !ok {
			t.Errorf("%s: store_dir %s is not a mounted volume", name, o.StoreDir)
		}
		// The passwords reach the node from the environment, as references.
		env := obj(svc, "environment")
		for u := range pw {
			if v := str(env, passwordEnv(u)); !strings.HasPrefix(v, "${"+passwordEnv(u)) {
				t.Errorf("%s: %s = %q, want ${%s...}", name, passwordEnv(u), v, passwordEnv(u))
			}
		}
		if !strings.Contains(fmt.Sprint(dig(svc, "healthcheck", "test")), "/healthz") {
			t.Errorf("%s: no /healthz health check (the roles wait for it)", name)
		}
	}
	if len(slices.Compact(slices.Sorted(slices.Values(names)))) != len(composeNodes) {
		t.Errorf("server names %q are not distinct", names)
	}
}

func TestComposeRoles(t *testing.T) {
	doc := composeFile(t)
	services := obj(doc, "services")
	for _, role := range serveRoles {
		svc := obj(services, role)
		if svc == nil {
			t.Errorf("no service %s", role)
			continue
		}
		if r, _ := dig(svc, "deploy", "replicas").(int); r != 2 {
			t.Errorf("%s: deploy.replicas %v, want 2", role, dig(svc, "deploy", "replicas"))
		}
		cmd := stringsOf(list(svc, "command"))
		if i := slices.Index(cmd, "--roles"); len(cmd) == 0 || cmd[0] != "serve" || i < 0 || i+1 >= len(cmd) || cmd[i+1] != role {
			t.Errorf("%s: command %q is not serve --roles %s", role, cmd, role)
		}
		for _, n := range composeNodes {
			if str(svc, "depends_on", n, "condition") != "service_healthy" {
				t.Errorf("%s: does not depend on %s being healthy", role, n)
			}
		}
		if str(svc, "depends_on", "provision", "condition") != "service_completed_successfully" {
			t.Errorf("%s: does not wait for the streams to be provisioned", role)
		}
		if svc["read_only"] != true || !slices.Contains(stringsOf(list(svc, "cap_drop")), "ALL") {
			t.Errorf("%s: want read_only and cap_drop ALL", role)
		}
		raw := str(svc, "environment", "COUNTERSIGN_NATS_URL")
		ref := "${" + passwordEnv(role)
		var hosts []string
		for _, s := range strings.Split(raw, ",") {
			user, rest, _ := strings.Cut(strings.TrimPrefix(s, "nats://"), ":")
			pass, host, _ := strings.Cut(rest, "@")
			if !strings.HasPrefix(s, "nats://") || user != role || !strings.HasPrefix(pass, ref) {
				t.Errorf("%s: NATS URL %q: want nats://%s:%s...}@node:4222", role, s, role, ref)
			}
			hosts = append(hosts, host)
		}
		if !slices.Equal(hosts, []string{"n1:4222", "n2:4222", "n3:4222"}) {
			t.Errorf("%s: NATS hosts %q, want every node", role, hosts)
		}
	}
	// Provisioning runs once, as admin, on every node, after they are up.
	prov := obj(services, "provision")
	if cmd := stringsOf(list(prov, "command")); len(cmd) < 5 || cmd[0] != "provision" || !slices.Contains(cmd, "admin") ||
		!slices.Contains(cmd, "nats://n1:4222,nats://n2:4222,nats://n3:4222") {
		t.Errorf("provision command %q: want provision --nats-url <every node> --user admin", cmd)
	}
	if pw := str(prov, "environment", "COUNTERSIGN_NATS_PASSWORD"); !strings.HasPrefix(pw, "${COUNTERSIGN_ADMIN_PASSWORD") {
		t.Errorf("provision password %q: want a reference to the admin password", pw)
	}
	for _, n := range composeNodes {
		if str(prov, "depends_on", n, "condition") != "service_healthy" {
			t.Errorf("provision does not wait for %s", n)
		}
	}
	// Two API replicas need two host ports.
	ports := stringsOf(list(services, "api", "ports"))
	if len(ports) != 1 || !strings.Contains(ports[0], "8080-8081:8080") {
		t.Errorf("api ports %q: two replicas need a range of two host ports", ports)
	}
	for _, b := range literalSecrets("compose.yaml", doc) {
		t.Errorf("literal secret: %s", b)
	}
	for name, svc := range services {
		for k, v := range obj(svc, "environment") {
			s, _ := v.(string)
			for _, part := range strings.Split(s, ",") {
				if u, err := url.Parse(part); err == nil && u.User != nil {
					if p, ok := u.User.Password(); ok && !isReference(p) {
						t.Errorf("%s: %s: URL with a literal password", name, k)
					}
				}
			}
		}
	}
}
