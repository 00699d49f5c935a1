package contracts

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// schemaSuffix ends the file name of every JSON Schema under schema/.
const schemaSuffix = ".schema.json"

//go:embed schema/*.json
var schemaFS embed.FS

// Schema returns the JSON Schema (draft 2020-12) of one message of the
// contract. name is one of SchemaNames, such as "vote" or "record"; the file
// name ("vote.schema.json") is accepted too. Schemas refer to each other by
// relative $ref against their $id, https://countersign.dev/schema/<file>. An
// unknown name gives an error wrapping fs.ErrNotExist.
func Schema(name string) ([]byte, error) {
	name = strings.TrimSuffix(name, schemaSuffix)
	if name == "" || strings.ContainsAny(name, `/\`) {
		return nil, fmt.Errorf("contracts: no schema %q: %w", name, fs.ErrNotExist)
	}
	data, err := schemaFS.ReadFile(path.Join("schema", name+schemaSuffix))
	if err != nil {
		return nil, fmt.Errorf("contracts: no schema %q: %w", name, fs.ErrNotExist)
	}
	return data, nil
}

// SchemaNames lists the names Schema accepts, sorted.
func SchemaNames() []string {
	entries, err := schemaFS.ReadDir("schema")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), schemaSuffix); ok && !e.IsDir() {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}
