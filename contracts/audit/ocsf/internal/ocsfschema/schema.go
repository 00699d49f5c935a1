// Package ocsfschema checks events against the OCSF schema's own files
// (the ocsf-schema repository's dictionary, categories, event classes,
// objects and profiles, vendored under v1.8.0 with its license): every
// attribute is one the class or object defines, of the dictionary's type,
// arrays where the dictionary says so, enum values the class allows, sibling
// captions that match their ids, required attributes present, the objects'
// at_least_one and just_one constraints met, and the class, category and
// type ids consistent. Profile attributes count only where the event's
// metadata.profiles names the profile.
package ocsfschema

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"strings"
)

//go:embed all:v1.8.0
var files embed.FS

// attr is an attribute as a class or object defines it, merged over its
// parents' and the dictionary's definition.
type attr struct {
	Type        string                     `json:"type"`
	IsArray     bool                       `json:"is_array"`
	Requirement string                     `json:"requirement"`
	Sibling     string                     `json:"sibling"`
	Enum        map[string]json.RawMessage `json:"enum"`
	// Profile is the profile that brings the attribute, "" for none.
	Profile string
}

// def is a resolved class or object.
type def struct {
	Name        string
	UID         int // a class's class_uid
	Category    int
	Attributes  map[string]*attr
	Constraints map[string][]string
}

// Schema is a loaded schema.
type Schema struct {
	dict       map[string]*attr
	types      map[string]typeDef
	categories map[string]int
	classes    map[int]*def
	objects    map[string]*def
	fsys       fs.FS
}

type typeDef struct {
	Type  string `json:"type"`
	Regex string `json:"regex"`
}

// file is a class, object or profile file as written.
type file struct {
	Name        string                     `json:"name"`
	UID         int                        `json:"uid"`
	Category    string                     `json:"category"`
	Extends     string                     `json:"extends"`
	Attributes  map[string]json.RawMessage `json:"attributes"`
	Constraints map[string][]string        `json:"constraints"`
}

// Load reads the vendored schema.
func Load() (*Schema, error) {
	sub, err := fs.Sub(files, "v1.8.0")
	if err != nil {
		return nil, err
	}
	s := &Schema{fsys: sub, classes: map[int]*def{}, objects: map[string]*def{}, categories: map[string]int{}}
	if err := s.loadDictionary(); err != nil {
		return nil, err
	}
	var cats struct {
		Attributes map[string]struct{ UID int } `json:"attributes"`
	}
	if err := s.readJSON("categories.json", &cats); err != nil {
		return nil, err
	}
	for name, c := range cats.Attributes {
		s.categories[name] = c.UID
	}
	classFiles, err := fs.Glob(sub, "events/*/*.json")
	if err != nil {
		return nil, err
	}
	for _, p := range classFiles {
		d, err := s.resolve(p, "events")
		if err != nil {
			return nil, err
		}
		if d.UID != 0 && d.Category != 0 {
			d.UID += d.Category * 1000
			s.classes[d.UID] = d
		}
	}
	return s, nil
}

func (s *Schema) loadDictionary() error {
	var d struct {
		Attributes map[string]*attr `json:"attributes"`
		Types      struct {
			Attributes map[string]typeDef `json:"attributes"`
		} `json:"types"`
	}
	if err := s.readJSON("dictionary.json", &d); err != nil {
		return err
	}
	s.dict, s.types = d.Attributes, d.Types.Attributes
	return nil
}

func (s *Schema) readJSON(p string, v any) error {
	data, err := fs.ReadFile(s.fsys, p)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("ocsfschema: %s: %w", p, err)
	}
	return nil
}

// object is the resolved object name; an object whose file is not vendored
// is an error, never a pass.
func (s *Schema) object(name string) (*def, error) {
	if d, ok := s.objects[name]; ok {
		return d, nil
	}
	d, err := s.resolve("objects/"+name+".json", "objects")
	if err != nil {
		return nil, fmt.Errorf("ocsfschema: object %q: %w", name, err)
	}
	s.objects[name] = d
	return d, nil
}

// resolve reads the file at p and merges it over the definition it
// extends (searched for in dir), its included profiles in between.
func (s *Schema) resolve(p, dir string) (*def, error) {
	var f file
	if err := s.readJSON(p, &f); err != nil {
		return nil, err
	}
	d := &def{Name: f.Name, UID: f.UID, Attributes: map[string]*attr{}, Constraints: f.Constraints}
	if f.Extends != "" {
		parentPath, err := s.find(dir, f.Extends)
		if err != nil {
			return nil, err
		}
		parent, err := s.resolve(parentPath, dir)
		if err != nil {
			return nil, err
		}
		d.Category = parent.Category
		for k, v := range parent.Attributes {
			c := *v
			c.Enum = maps.Clone(v.Enum)
			d.Attributes[k] = &c
		}
		if d.Constraints == nil {
			d.Constraints = parent.Constraints
		}
	}
	if c, ok := s.categories[f.Category]; ok {
		d.Category = c
	}
	if err := s.include(d, f.Attributes); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if err := mergeAttrs(d, f.Attributes, ""); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return d, nil
}

// find is the file in dir (searched through its folders) whose name is name.
func (s *Schema) find(dir, name string) (string, error) {
	for _, p := range []string{dir + "/" + name + ".json", dir + "/*/" + name + ".json"} {
		m, err := fs.Glob(s.fsys, p)
		if err != nil {
			return "", err
		}
		if len(m) > 0 {
			return m[0], nil
		}
	}
	return "", fmt.Errorf("%s %q is not vendored", path.Base(dir), name)
}

// include merges the profiles attrs["$include"] names, each attribute
// marked with its profile.
func (s *Schema) include(d *def, attrs map[string]json.RawMessage) error {
	raw, ok := attrs["$include"]
	if !ok {
		return nil
	}
	var paths []string
	if err := json.Unmarshal(raw, &paths); err != nil {
		return err
	}
	for _, p := range paths {
		var prof file
		if err := s.readJSON(p, &prof); err != nil {
			return err
		}
		profile := ""
		if strings.HasPrefix(p, "profiles/") {
			profile = prof.Name
		}
		if err := mergeAttrs(d, prof.Attributes, profile); err != nil {
			return err
		}
	}
	return nil
}

// mergeAttrs lays attrs over d's: each key given replaces the one before;
// "profile": null unbinds an attribute from its profile.
func mergeAttrs(d *def, attrs map[string]json.RawMessage, profile string) error {
	for name, raw := range attrs {
		if name == "$include" {
			continue
		}
		var over map[string]json.RawMessage
		if err := json.Unmarshal(raw, &over); err != nil {
			return fmt.Errorf("attribute %s: %w", name, err)
		}
		a, ok := d.Attributes[name]
		if !ok {
			a = &attr{Profile: profile}
			d.Attributes[name] = a
		}
		if err := json.Unmarshal(raw, a); err != nil {
			return fmt.Errorf("attribute %s: %w", name, err)
		}
		if p, ok := over["profile"]; ok {
			a.Profile = ""
			_ = json.Unmarshal(p, &a.Profile) // null leaves it ""
		}
	}
	return nil
}
