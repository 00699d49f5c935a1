package deploy_test

import (
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/events/embedded"
)

// natsSecret is the Secret that holds every NATS password, one key per
// user (<user>-password).
const natsSecret = "countersign-nats"

// k8sObject is one parsed manifest document.
type k8sObject struct {
	file string
	doc  map[string]any
}

func (o k8sObject) kind() string { return str(o.doc, "kind") }
func (o k8sObject) name() string { return str(o.doc, "metadata", "name") }
func (o k8sObject) String() string {
	return fmt.Sprintf("%s %s (%s)", o.kind(), o.name(), filepath.Base(o.file))
}

func k8sObjects(t *testing.T) []k8sObject {
	t.Helper()
	var objs []k8sObject
	for _, f := range files(t, "k8s", ".yaml") {
		for _, d := range yamlDocs(t, f) {
			objs = append(objs, k8sObject{file: f, doc: d})
		}
	}
	return objs
}

func byKind(objs []k8sObject, kind string) []k8sObject {
	var out []k8sObject
	for _, o := range objs {
		if o.kind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func TestK8sManifestsHaveIdentity(t *testing.T) {
	seen := map[string]bool{}
	for _, o := range k8sObjects(t) {
		for _, f := range []string{"apiVersion", "kind"} {
			if str(o.doc, f) == "" {
				t.Errorf("%s: no %s", o.file, f)
			}
		}
		if o.name() == "" {
			t.Errorf("%s: %s without metadata.name", o.file, o.kind())
		}
		key := o.kind() + "/" + o.name()
		if seen[key] {
			t.Errorf("%s: %s is defined twice", o.file, key)
		}
		seen[key] = true
		if o.kind() == "Secret" {
			t.Errorf("%s: a Secret in the manifests; secrets are created by the operator and referenced", o)
		}
	}
	for _, want := range []string{"ConfigMap/countersign-config", "Service/countersign-api"} {
		if !seen[want] {
			t.Errorf("no %s", want)
		}
	}
}

// labelsMatch reports whether every selector label is in labels.
func labelsMatch(selector, labels map[string]any) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// deployments returns the Deployment of each serve role.
func deployments(t *testing.T, objs []k8sObject) map[string]k8sObject {
	t.Helper()
	out := map[string]k8sObject{}
	for _, d := range byKind(objs, "Deployment") {
		args := stringsOf(list(d.doc, "spec", "template", "spec", "containers", 0, "args"))
		i := slices.Index(args, "--roles")
		if i < 0 || i+1 >= len(args) {
			t.Errorf("%s: container args %q have no --roles ROLE", d, args)
			continue
		}
		role := args[i+1]
		if !slices.Contains(serveRoles, role) {
			t.Errorf("%s: --roles %q is not one role of %q", d, role, serveRoles)
			continue
		}
		if _, dup := out[role]; dup {
			t.Errorf("%s: a second Deployment for role %s", d, role)
		}
		out[role] = d
	}
	for _, r := range serveRoles {
		if _, ok := out[r]; !ok {
			t.Errorf("no Deployment runs role %s", r)
		}
	}
	return out
}

func TestK8sDeployments(t *testing.T) {
	objs := k8sObjects(t)
	cm := configMapData(t, objs)
	for role, d := range deployments(t, objs) {
		spec := obj(d.doc, "spec")
		if r, _ := spec["replicas"].(int); r != 2 {
			t.Errorf("%s: replicas %v, want 2", d, spec["replicas"])
		}
		podLabels := obj(spec, "template", "metadata", "labels")
		if !labelsMatch(obj(spec, "selector", "matchLabels"), podLabels) {
			t.Errorf("%s: selector %v does not select its pods %v", d, obj(spec, "selector", "matchLabels"), podLabels)
		}
		pod := obj(spec, "template", "spec")
		if dig(pod, "securityContext", "runAsNonRoot") != true {
			t.Errorf("%s: pod securityContext.runAsNonRoot is not true", d)
		}
		if str(pod, "securityContext", "seccompProfile", "type") != "RuntimeDefault" {
			t.Errorf("%s: no RuntimeDefault seccomp profile", d)
		}
		volumes := map[string]map[string]any{}
		for _, v := range list(pod, "volumes") {
			m, _ := v.(map[string]any)
			volumes[str(m, "name")] = m
		}
		containers := list(pod, "containers")
		if len(containers) != 1 {
			t.Fatalf("%s: %d containers, want 1", d, len(containers))
		}
		c := containers[0].(map[string]any)
		where := fmt.Sprintf("%s container %s", d, str(c, "name"))

		image := str(c, "image")
		if image == "" || !strings.Contains(image, ":") || strings.HasSuffix(image, ":latest") {
			t.Errorf("%s: image %q must be pinned to a tag", where, image)
		}
		args := stringsOf(list(c, "args"))
		if len(args) == 0 || args[0] != "serve" {
			t.Errorf("%s: args %q do not start with serve", where, args)
		}
		if slices.Contains(args, "--nats-url") {
			t.Errorf("%s: --nats-url in args would put the password in the process arguments; use COUNTERSIGN_NATS_URL", where)
		}

		// Mounts: the config file is in the ConfigMap; the data directory
		// is writable, because the root filesystem is not.
		mounts := map[string]map[string]any{}
		for _, m := range list(c, "volumeMounts") {
			mm, _ := m.(map[string]any)
			if volumes[str(mm, "name")] == nil {
				t.Errorf("%s: mount of undeclared volume %q", where, str(mm, "name"))
			}
			mounts[str(mm, "mountPath")] = mm
		}
		cfgPath := ""
		if i := slices.Index(args, "--config"); i >= 0 && i+1 < len(args) {
			cfgPath = args[i+1]
		}
		cfgMount := mounts[filepath.Dir(cfgPath)]
		if cfgMount == nil || str(volumes[str(cfgMount, "name")], "configMap", "name") != "countersign-config" ||
			cm[filepath.Base(cfgPath)] == "" {
			t.Errorf("%s: --config %q is not a key of the countersign-config ConfigMap mounted there", where, cfgPath)
		}
		var cfg map[string]any
		if err := yaml.Unmarshal([]byte(cm[filepath.Base(cfgPath)]), &cfg); err != nil {
			t.Fatalf("%s: %v", cfgPath, err)
		}
		dataMount := mounts[str(cfg, "data")]
		if dataMount == nil || dataMount["readOnly"] == true || volumes[str(dataMount, "name")]["emptyDir"] == nil {
			t.Errorf("%s: the data directory %q is not a writable emptyDir", where, str(cfg, "data"))
		}
		for _, key := range []string{"policy", "directory"} {
			p := str(cfg, key)
			if m := mounts[filepath.Dir(p)]; m == nil || m["name"] != cfgMount["name"] || cm[filepath.Base(p)] == "" {
				t.Errorf("%s: %s %q is not a key of the mounted ConfigMap", where, key, p)
			}
		}

		// Resources.
		for _, path := range [][]any{{"requests", "cpu"}, {"requests", "memory"}, {"limits", "memory"}} {
			if dig(c, append([]any{"resources"}, path...)...) == nil {
				t.Errorf("%s: no resources.%s.%s", where, path[0], path[1])
			}
		}

		// Container hardening.
		sc := obj(c, "securityContext")
		if sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false || sc["privileged"] == true {
			t.Errorf("%s: securityContext %v: want readOnlyRootFilesystem, no privilege escalation, not privileged", where, sc)
		}
		if !slices.Contains(stringsOf(list(sc, "capabilities", "drop")), "ALL") {
			t.Errorf("%s: capabilities do not drop ALL", where)
		}

		checkNATSEnv(t, where, role, list(c, "env"))
		checkProbes(t, where, role, c)
	}
}

// checkNATSEnv checks that the role connects to all three NATS nodes as its
// own user, with the password from the Secret.
func checkNATSEnv(t *testing.T, where, role string, env []any) {
	t.Helper()
	vars := map[string]map[string]any{}
	for _, e := range env {
		m, _ := e.(map[string]any)
		vars[str(m, "name")] = m
	}
	pw := vars["NATS_PASSWORD"]
	if str(pw, "valueFrom", "secretKeyRef", "name") != natsSecret || str(pw, "valueFrom", "secretKeyRef", "key") != role+"-password" {
		t.Errorf("%s: NATS_PASSWORD is not secretKeyRef %s/%s-password: %v", where, natsSecret, role, pw)
	}
	// Kubernetes substitutes $(VAR) only from variables defined earlier.
	if slices.IndexFunc(env, func(e any) bool { return str(e, "name") == "NATS_PASSWORD" }) >
		slices.IndexFunc(env, func(e any) bool { return str(e, "name") == "COUNTERSIGN_NATS_URL" }) {
		t.Errorf("%s: NATS_PASSWORD must come before COUNTERSIGN_NATS_URL", where)
	}
	raw := str(vars["COUNTERSIGN_NATS_URL"], "value")
	var hosts []string
	for _, s := range strings.Split(raw, ",") {
		u, err := url.Parse(strings.ReplaceAll(s, "$(NATS_PASSWORD)", "PASSWORD"))
		if err != nil {
			t.Errorf("%s: COUNTERSIGN_NATS_URL: %v", where, err)
			continue
		}
		p, _ := u.User.Password()
		if u.Scheme != "nats" || u.User.Username() != role || p != "PASSWORD" {
			t.Errorf("%s: NATS URL %q: want nats://%s:$(NATS_PASSWORD)@host:port", where, s, role)
		}
		hosts = append(hosts, u.Host)
	}
	want := []string{"nats-0.nats-headless:4222", "nats-1.nats-headless:4222", "nats-2.nats-headless:4222"}
	if !slices.Equal(hosts, want) {
		t.Errorf("%s: NATS hosts %q, want the three pods of the Helm release `nats` %q", where, hosts, want)
	}
}

// checkProbes: every role serves /healthz and /readyz on a named port (the
// api with the API; arbiter and notifier with a small health and metrics
// server on the same address).
func checkProbes(t *testing.T, where, role string, c map[string]any) {
	t.Helper()
	ports := map[string]bool{}
	for _, p := range list(c, "ports") {
		ports[str(p, "name")] = true
	}
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		get := obj(c, probe, "httpGet")
		if str(get, "path") != path {
			t.Errorf("%s: %s path %q, want %s", where, probe, str(get, "path"), path)
		}
		if port := str(get, "port"); !ports[port] {
			t.Errorf("%s: %s port %q is not a named container port", where, probe, port)
		}
	}
	if p, _ := dig(c, "ports", 0, "containerPort").(int); p != 8080 {
		t.Errorf("%s: container port %v, want 8080 (addr in countersign.yaml)", where, p)
	}
}

func TestK8sDisruptionBudgets(t *testing.T) {
	objs := k8sObjects(t)
	deps := deployments(t, objs)
	pdbs := byKind(objs, "PodDisruptionBudget")
	for role, d := range deps {
		pods := obj(d.doc, "spec", "template", "metadata", "labels")
		var covering []k8sObject
		for _, p := range pdbs {
			if labelsMatch(obj(p.doc, "spec", "selector", "matchLabels"), pods) {
				covering = append(covering, p)
			}
		}
		if len(covering) != 1 {
			t.Errorf("role %s: %d PodDisruptionBudgets select its pods, want 1", role, len(covering))
			continue
		}
		if v, _ := dig(covering[0].doc, "spec", "minAvailable").(int); v != 1 {
			t.Errorf("%s: minAvailable %v, want 1", covering[0], dig(covering[0].doc, "spec", "minAvailable"))
		}
	}
	if len(pdbs) != len(serveRoles) {
		t.Errorf("%d PodDisruptionBudgets, want one per role (%d)", len(pdbs), len(serveRoles))
	}
}

func TestK8sServiceSelectsAPIOnly(t *testing.T) {
	objs := k8sObjects(t)
	deps := deployments(t, objs)
	for _, s := range byKind(objs, "Service") {
		sel := obj(s.doc, "spec", "selector")
		for role, d := range deps {
			pods := obj(d.doc, "spec", "template", "metadata", "labels")
			if got := labelsMatch(sel, pods); got != (role == "api") {
				t.Errorf("%s: selects the %s pods: %v", s, role, got)
			}
		}
		c := obj(deps["api"].doc, "spec", "template", "spec", "containers", 0)
		for _, p := range list(s.doc, "spec", "ports") {
			target := str(p, "targetPort")
			if !slices.ContainsFunc(list(c, "ports"), func(cp any) bool { return str(cp, "name") == target }) {
				t.Errorf("%s: targetPort %q is not a named port of the api container", s, target)
			}
		}
	}
}

// configMapData returns the data of the countersign-config ConfigMap.
func configMapData(t *testing.T, objs []k8sObject) map[string]string {
	t.Helper()
	for _, o := range byKind(objs, "ConfigMap") {
		if o.name() == "countersign-config" {
			data := map[string]string{}
			for k, v := range obj(o.doc, "data") {
				s, _ := v.(string)
				data[k] = s
			}
			return data
		}
	}
	t.Fatal("no ConfigMap countersign-config")
	return nil
}

func TestK8sConfigMapMatchesFiles(t *testing.T) {
	data := configMapData(t, k8sObjects(t))
	for key, path := range map[string]string{
		"countersign.yaml": "cluster/countersign.yaml",
		"policy.yaml":      "policy.yaml",
		"directory.yaml":   "directory.yaml",
	} {
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if data[key] != string(want) {
			t.Errorf("ConfigMap key %s differs from %s; copy the file into deploy/k8s/configmap.yaml", key, path)
		}
	}
	if len(data) != 3 {
		t.Errorf("ConfigMap keys %q, want countersign.yaml, policy.yaml, directory.yaml", slices.Sorted(maps.Keys(data)))
	}
}

// configKeys are the keys countersign.yaml accepts, read from the yaml tags
// of services/countersign and api.Token (serve rejects unknown keys).
func configKeys(t *testing.T) map[string]bool {
	t.Helper()
	keys := map[string]bool{}
	re := regexp.MustCompile("yaml:\"([a-z_0-9]+)[\",]")
	// The api.Token fields of tokens: are in services/api/config.go, the
	// api.Budgets fields of budgets: in services/api/budget.go.
	for _, f := range append(files(t, "../services/countersign", ".go"), "../services/api/config.go", "../services/api/budget.go") {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			keys[m[1]] = true
		}
	}
	if !keys["nats"] || !keys["replicas"] {
		t.Fatalf("found no countersign.yaml keys in services/countersign: %v", keys)
	}
	return keys
}

func TestServeConfigUsesKnownKeys(t *testing.T) {
	known := configKeys(t)
	var cfg map[string]any
	data, err := os.ReadFile("cluster/countersign.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, v := range x {
				if !known[k] {
					t.Errorf("countersign.yaml: key %s%s is not a serve config key", prefix, k)
				}
				walk(prefix+k+".", v)
			}
		case []any:
			for _, v := range x {
				walk(prefix, v)
			}
		}
	}
	walk("", cfg)
	if r, _ := dig(cfg, "nats", "replicas").(int); r != 3 {
		t.Errorf("countersign.yaml: nats.replicas %v, want 3 for the 3-node cluster", dig(cfg, "nats", "replicas"))
	}
	if len(list(cfg, "tokens")) == 0 {
		t.Error("countersign.yaml: no tokens: every API replica would generate its own development token")
	}
}

// secretKey matches the names of values that must never be literal.
var secretKey = regexp.MustCompile(`(?i)(password|passwd|secret|token|credential|private_?key)`)

// literalSecrets walks parsed YAML and reports string values under secret
// names that are not references (a Secret, the environment, a NATS config
// variable). YAML documents embedded in ConfigMap data are parsed too.
func literalSecrets(where string, v any) []string {
	var bad []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, v := range x {
				p := path + "." + k
				if s, ok := v.(string); ok {
					if strings.HasSuffix(k, ".yaml") {
						var inner any
						if yaml.Unmarshal([]byte(s), &inner) == nil {
							walk(p, inner)
						}
						continue
					}
					if secretKey.MatchString(k) && !isReference(s) {
						bad = append(bad, fmt.Sprintf("%s%s: %q", where, p, s))
					}
				}
				walk(p, v)
			}
		case []any:
			for i, v := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), v)
			}
		}
	}
	walk("", v)
	return bad
}

// isReference reports whether s names a secret instead of holding one.
func isReference(s string) bool {
	for _, ref := range []string{"$(", "${", "<< $", "env:"} {
		if strings.HasPrefix(strings.TrimSpace(s), ref) {
			return true
		}
	}
	return s == ""
}

func TestK8sNoLiteralSecrets(t *testing.T) {
	for _, o := range k8sObjects(t) {
		for _, b := range literalSecrets(o.String(), o.doc) {
			t.Errorf("literal secret: %s", b)
		}
		// Every environment variable with a secret's name comes from a
		// Secret, and no URL carries a literal password.
		for _, c := range list(o.doc, "spec", "template", "spec", "containers") {
			for _, e := range list(c, "env") {
				name := str(e, "name")
				if secretKey.MatchString(name) && str(e, "valueFrom", "secretKeyRef", "name") == "" {
					t.Errorf("%s: env %s is not from a secretKeyRef", o, name)
				}
				for _, s := range strings.Split(str(e, "value"), ",") {
					if u, err := url.Parse(s); err == nil && u.User != nil {
						if p, ok := u.User.Password(); ok && !isReference(p) {
							t.Errorf("%s: env %s: URL with a literal password", o, name)
						}
					}
				}
			}
		}
	}
}

func TestLiteralSecretCheckFindsLiterals(t *testing.T) {
	doc := map[string]any{"data": map[string]any{
		"countersign.yaml": "nats:\n  password: hunter2\n",
		"ok.yaml":          "nats:\n  password: env:NATS_PASSWORD\n",
	}}
	if bad := literalSecrets("t", doc); len(bad) != 1 || !strings.Contains(bad[0], "hunter2") {
		t.Errorf("literalSecrets = %q, want the one literal password", bad)
	}
}

func TestHelmValues(t *testing.T) {
	v := yamlDocs(t, "helm/nats-values.yaml")[0]
	if dig(v, "config", "cluster", "enabled") != true || dig(v, "config", "cluster", "replicas") != 3 {
		t.Errorf("cluster: %v; want enabled with 3 replicas", obj(v, "config", "cluster"))
	}
	if dig(v, "config", "cluster", "merge", "no_advertise") != true {
		t.Error("cluster.merge.no_advertise is not true (clients list the nodes with credentials)")
	}
	js := obj(v, "config", "jetstream")
	if js["enabled"] != true || dig(js, "fileStore", "enabled") != true || dig(js, "fileStore", "pvc", "enabled") != true {
		t.Errorf("jetstream: %v; want enabled, with a file store on a PVC", js)
	}
	if str(js, "merge", "sync_interval") != "always" {
		t.Errorf("jetstream sync_interval %q, want always", str(js, "merge", "sync_interval"))
	}
	if str(v, "config", "merge", "system_account") != "SYS" {
		t.Error("system_account is not SYS")
	}
	if str(v, "config", "merge", "accounts", "COUNTERSIGN", "jetstream") != "enabled" {
		t.Error("the COUNTERSIGN account has no JetStream")
	}

	env := obj(v, "container", "env")
	referenced := map[string]bool{}
	checkUser := func(account string, u any) string {
		name := str(u, "user")
		want := "<< $" + passwordEnv(name) + " >>"
		if p := str(u, "password"); p != want {
			t.Errorf("%s user %s: password %q, want %q", account, name, p, want)
		}
		referenced[passwordEnv(name)] = true
		ref := obj(env, passwordEnv(name), "valueFrom", "secretKeyRef")
		if str(ref, "name") != natsSecret || str(ref, "key") != name+"-password" {
			t.Errorf("container.env %s: %v, want secretKeyRef %s/%s-password", passwordEnv(name), ref, natsSecret, name)
		}
		return name
	}
	var got []string
	for _, u := range list(v, "config", "merge", "accounts", "COUNTERSIGN", "users") {
		name := checkUser("COUNTERSIGN", u)
		got = append(got, name)
		r := embedded.Role(name)
		if !r.Valid() {
			t.Errorf("COUNTERSIGN user %q is not a role", name)
			continue
		}
		comparePermissions(t, "helm/nats-values.yaml", r, helmPermissions(u))
	}
	var roles []string
	for _, r := range embedded.Roles {
		roles = append(roles, string(r))
	}
	if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(roles))) {
		t.Errorf("COUNTERSIGN users %q, want one per role %q", got, roles)
	}
	sys := list(v, "config", "merge", "accounts", "SYS", "users")
	if len(sys) != 1 || checkUser("SYS", sys[0]) != "sys" {
		t.Errorf("SYS users %v, want sys", sys)
	}
	for name := range env {
		if !referenced[name] {
			t.Errorf("container.env %s is not used by the config", name)
		}
	}
	for _, b := range literalSecrets("helm/nats-values.yaml", v) {
		t.Errorf("literal secret: %s", b)
	}
}

// helmPermissions converts a user's permissions in the Helm values.
func helmPermissions(u any) *server.Permissions {
	sp := func(kind string) *server.SubjectPermission {
		p := obj(u, "permissions", kind)
		if p == nil {
			return nil
		}
		return &server.SubjectPermission{Allow: stringsOf(list(p, "allow")), Deny: stringsOf(list(p, "deny"))}
	}
	if obj(u, "permissions") == nil {
		return nil
	}
	p := &server.Permissions{Publish: sp("publish"), Subscribe: sp("subscribe")}
	if r, ok := obj(u, "permissions")["allow_responses"].(bool); ok && r {
		// What the NATS chart writes into the server's config as is.
		p.Response = &server.ResponsePermission{MaxMsgs: server.DEFAULT_ALLOW_RESPONSE_MAX_MSGS,
			Expires: server.DEFAULT_ALLOW_RESPONSE_EXPIRATION}
	}
	return p
}
