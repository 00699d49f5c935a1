package ocsfschema

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Validate checks one event (its JSON) against the class its class_uid
// names, and returns every problem found, each naming the attribute's path.
func (s *Schema) Validate(data []byte) []error {
	var ev map[string]any
	if err := json.Unmarshal(data, &ev); err != nil {
		return []error{err}
	}
	uid, ok := ev["class_uid"].(float64)
	if !ok {
		return []error{fmt.Errorf("class_uid: missing or not a number")}
	}
	class, ok := s.classes[int(uid)]
	if !ok {
		return []error{fmt.Errorf("class_uid: %v is not a class of the vendored schema", uid)}
	}
	v := &validation{s: s, profiles: profilesOf(ev)}
	v.object("", ev, class)
	v.classIDs(ev, class)
	return v.errs
}

type validation struct {
	s        *Schema
	profiles []string
	errs     []error
}

func (v *validation) fail(at, format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf("%s: %s", cmp.Or(at, "event"), fmt.Sprintf(format, args...)))
}

func profilesOf(ev map[string]any) []string {
	md, _ := ev["metadata"].(map[string]any)
	ps, _ := md["profiles"].([]any)
	var out []string
	for _, p := range ps {
		if s, ok := p.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// classIDs checks the ids that follow from the class: category_uid,
// and type_uid = class_uid × 100 + activity_id.
func (v *validation) classIDs(ev map[string]any, class *def) {
	if c, _ := ev["category_uid"].(float64); int(c) != class.Category {
		v.fail("category_uid", "%v, want %d for class %s", ev["category_uid"], class.Category, class.Name)
	}
	act, _ := ev["activity_id"].(float64)
	if t, _ := ev["type_uid"].(float64); int64(t) != int64(class.UID)*100+int64(act) {
		v.fail("type_uid", "%v, want class_uid × 100 + activity_id = %d", ev["type_uid"], int64(class.UID)*100+int64(act))
	}
}

// object checks obj against d: known attributes, required ones present,
// constraints met, each value checked.
func (v *validation) object(at string, obj map[string]any, d *def) {
	active := map[string]*attr{}
	for name, a := range d.Attributes {
		if a.Profile == "" || slices.Contains(v.profiles, a.Profile) {
			active[name] = a
		}
	}
	for _, name := range slices.Sorted(maps.Keys(obj)) {
		a, ok := active[name]
		if !ok {
			v.fail(join(at, name), "not an attribute of %s", d.Name)
			continue
		}
		v.value(join(at, name), name, obj[name], v.effective(name, a), obj)
	}
	for _, name := range slices.Sorted(maps.Keys(active)) {
		if _, ok := obj[name]; !ok && active[name].Requirement == "required" {
			v.fail(join(at, name), "required by %s, missing", d.Name)
		}
	}
	v.constraints(at, obj, d)
}

func (v *validation) constraints(at string, obj map[string]any, d *def) {
	for kind, names := range d.Constraints {
		n := 0
		for _, name := range names {
			if _, ok := obj[name]; ok {
				n++
			}
		}
		switch {
		case kind == "at_least_one" && n == 0:
			v.fail(at, "%s needs at least one of %s", d.Name, strings.Join(names, ", "))
		case kind == "just_one" && n != 1:
			v.fail(at, "%s needs just one of %s, has %d", d.Name, strings.Join(names, ", "), n)
		}
	}
}

// effective is a merged over the dictionary's definition of name, the
// enums joined.
func (v *validation) effective(name string, a *attr) attr {
	var e attr
	if d, ok := v.s.dict[name]; ok {
		e = *d
		e.Enum = maps.Clone(d.Enum)
	}
	if a.Type != "" {
		e.Type = a.Type
	}
	if a.Sibling != "" {
		e.Sibling = a.Sibling
	}
	if name == "class_uid" || name == "category_uid" || name == "type_uid" {
		// The schema's compiler makes these enums from the classes;
		// classIDs checks them against the class.
		e.Enum = nil
		return e
	}
	if len(a.Enum) > 0 {
		if e.Enum == nil {
			e.Enum = map[string]json.RawMessage{}
		}
		maps.Copy(e.Enum, a.Enum)
	}
	return e
}

// value checks one attribute's value: array or not, its type, its enum,
// its sibling's caption.
func (v *validation) value(at, name string, val any, a attr, parent map[string]any) {
	if a.Type == "" {
		v.fail(at, "the dictionary has no type for %s", name)
		return
	}
	if a.IsArray {
		arr, ok := val.([]any)
		if !ok {
			v.fail(at, "want an array of %s", a.Type)
			return
		}
		for i, el := range arr {
			one := a
			one.IsArray = false
			v.value(at+"["+strconv.Itoa(i)+"]", name, el, one, nil)
		}
		return
	}
	v.typed(at, val, a.Type)
	if len(a.Enum) > 0 {
		v.enum(at, val, a, parent)
	}
}

func (v *validation) enum(at string, val any, a attr, parent map[string]any) {
	key := fmt.Sprint(val)
	if f, ok := val.(float64); ok {
		key = strconv.FormatFloat(f, 'f', -1, 64)
	}
	raw, ok := a.Enum[key]
	if !ok {
		keys := slices.Collect(maps.Keys(a.Enum))
		sort.Strings(keys)
		v.fail(at, "%v is not one of the enum's values %s", val, strings.Join(keys, ", "))
		return
	}
	if a.Sibling == "" || parent == nil || key == "99" {
		return // 99 (Other): the sibling holds the source's own label
	}
	var cap struct{ Caption string }
	_ = json.Unmarshal(raw, &cap)
	if got, ok := parent[a.Sibling]; ok && got != cap.Caption {
		v.fail(join(parentOf(at), a.Sibling), "%v, want %q (the caption of %s)", got, cap.Caption, key)
	}
}

// typed checks val against a dictionary type or an object.
func (v *validation) typed(at string, val any, typ string) {
	base, regex := typ, ""
	for {
		t, ok := v.s.types[base]
		if !ok {
			break
		}
		if regex == "" {
			regex = t.Regex
		}
		if t.Type == "" {
			break
		}
		base = t.Type
	}
	switch base {
	case "string_t":
		s, ok := val.(string)
		if !ok {
			v.fail(at, "want a string (%s)", typ)
		} else if regex != "" && !regexp.MustCompile(regex).MatchString(s) {
			v.fail(at, "%q does not match %s's pattern", s, typ)
		}
	case "integer_t", "long_t":
		f, ok := val.(float64)
		if !ok || f != math.Trunc(f) || base == "integer_t" && math.Abs(f) > math.MaxInt32 {
			v.fail(at, "want an integer (%s), got %v", typ, val)
		}
	case "float_t":
		if _, ok := val.(float64); !ok {
			v.fail(at, "want a number (%s)", typ)
		}
	case "boolean_t":
		if _, ok := val.(bool); !ok {
			v.fail(at, "want a boolean (%s)", typ)
		}
	case "json_t":
	case "object":
		if _, ok := val.(map[string]any); !ok {
			v.fail(at, "want an object")
		}
	default:
		v.objectValue(at, val, base)
	}
}

func (v *validation) objectValue(at string, val any, name string) {
	obj, ok := val.(map[string]any)
	if !ok {
		v.fail(at, "want a %s object", name)
		return
	}
	d, err := v.s.object(name)
	if err != nil {
		v.fail(at, "%v", err)
		return
	}
	v.object(at, obj, d)
}

func join(at, name string) string {
	if at == "" {
		return name
	}
	return at + "." + name
}

// parentOf is the path of the object holding the attribute at.
func parentOf(at string) string {
	if i := strings.LastIndex(at, "."); i >= 0 {
		return at[:i]
	}
	return ""
}
