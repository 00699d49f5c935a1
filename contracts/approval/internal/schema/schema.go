// Package schema compiles JSON Schemas that come with requests (a tool's
// arguments schema, a question's answer schema) and validates values
// against them. A schema may refer only to itself and the standard
// meta-schemas: nothing is ever fetched, over the network or from files.
// Compiled schemas are cached by the SHA-256 of their bytes.
package schema

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// ErrInvalid is wrapped by the errors of Compile: the document
// is not a JSON Schema that can be used here.
var ErrInvalid = errors.New("invalid JSON Schema")

// Error says where a value fails a JSON Schema: Field is the JSON
// pointer of the failing value, prefixed with the name of the field that
// holds the value ("arguments/amount", "answer/content/email"), and Message
// says why for people.
type Error struct {
	Field   string
	Message string
}

func (e *Error) Error() string { return e.Field + ": " + e.Message }

// printer renders validation messages.
var printer = message.NewPrinter(language.English)

// schemaLocation is the base URL of every compiled schema. Nothing is ever
// fetched from it: a schema is compiled from the bytes of the request.
// The host is reserved (RFC 2606), so a relative $ref resolves to a URL
// that the loader refuses rather than to the schema itself.
const schemaLocation = "https://countersign.invalid/schema.json"

// maxCachedSchemas bounds the compiled schemas kept in memory.
const maxCachedSchemas = 256

// schemas caches compiled schemas by the SHA-256 of their bytes. It holds
// only derived data, so sharing it process-wide changes no behaviour.
var schemas = &schemaCache{m: map[[32]byte]schemaEntry{}}

type schemaEntry struct {
	s   *jsonschema.Schema
	err error
}

type schemaCache struct {
	mu sync.Mutex
	m  map[[32]byte]schemaEntry
}

func (c *schemaCache) get(raw json.RawMessage) (*jsonschema.Schema, error) {
	key := sha256.Sum256(raw)
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return e.s, e.err
	}
	s, err := compileSchema(raw)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCachedSchemas {
		for k := range c.m { // evict one arbitrary entry
			delete(c.m, k)
			break
		}
	}
	c.m[key] = schemaEntry{s: s, err: err}
	return s, err
}

// noRemote refuses to load any document: a schema may only refer to itself
// (and the standard meta-schemas, which the library embeds).
type noRemote struct{}

func (noRemote) Load(url string) (any, error) {
	return nil, fmt.Errorf("$ref to %s: schemas may not refer to other documents", url)
}

func compileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, fmt.Errorf("%w: a schema must be a JSON object", ErrInvalid)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noRemote{})
	if err := c.AddResource(schemaLocation, doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	s, err := c.Compile(schemaLocation)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.TrimPrefix(err.Error(), "jsonschema: "))
	}
	return s, nil
}

// Compile checks that raw is a JSON Schema (a JSON object, draft
// 2020-12 unless it names another) that compiles without fetching anything.
func Compile(raw json.RawMessage) error {
	_, err := schemas.get(raw)
	return err
}

// Validate checks value against schema. It returns nil when the value
// conforms; a *Error whose Field is field followed by the JSON pointer
// of the failing value when it does not; and a *Error at field when
// the value is not JSON or the schema does not compile, so a caller can fail
// closed on every error alike.
func Validate(schema, value json.RawMessage, field string) *Error {
	s, err := schemas.get(schema)
	if err != nil {
		return &Error{Field: field, Message: "the schema to check against is unusable: " + err.Error()}
	}
	var inst any
	if len(bytes.TrimSpace(value)) > 0 {
		if inst, err = jsonschema.UnmarshalJSON(bytes.NewReader(value)); err != nil {
			return &Error{Field: field, Message: "not valid JSON"}
		}
	}
	err = s.Validate(inst)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return &Error{Field: field, Message: err.Error()}
	}
	return schemaErrorAt(verr, field)
}

// schemaErrorAt reports the first innermost cause of a validation error: the
// most specific place and reason.
func schemaErrorAt(verr *jsonschema.ValidationError, field string) *Error {
	for len(verr.Causes) > 0 {
		verr = verr.Causes[0]
	}
	loc := verr.InstanceLocation
	// A missing or unexpected property is named by its own pointer.
	switch k := verr.ErrorKind.(type) {
	case *kind.Required:
		if len(k.Missing) > 0 {
			loc = append(loc[:len(loc):len(loc)], k.Missing[0])
		}
	case *kind.AdditionalProperties:
		if len(k.Properties) > 0 {
			loc = append(loc[:len(loc):len(loc)], k.Properties[0])
		}
	}
	var b strings.Builder
	b.WriteString(field)
	for _, tok := range loc {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(tok))
	}
	return &Error{Field: b.String(), Message: describe(verr.ErrorKind)}
}

// describe says what is wrong with the value at the error's pointer. The
// library's messages group digits ("5,000"), which misquotes JSON numbers,
// so the numeric ones are worded here.
func describe(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Required:
		return "is required"
	case *kind.AdditionalProperties:
		return "is not an allowed property"
	case *kind.Minimum:
		return fmt.Sprintf("must be at least %s (got %s)", ratString(k.Want), ratString(k.Got))
	case *kind.Maximum:
		return fmt.Sprintf("must be at most %s (got %s)", ratString(k.Want), ratString(k.Got))
	case *kind.ExclusiveMinimum:
		return fmt.Sprintf("must be greater than %s (got %s)", ratString(k.Want), ratString(k.Got))
	case *kind.ExclusiveMaximum:
		return fmt.Sprintf("must be less than %s (got %s)", ratString(k.Want), ratString(k.Got))
	case *kind.MultipleOf:
		return fmt.Sprintf("must be a multiple of %s (got %s)", ratString(k.Want), ratString(k.Got))
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d characters long (got %d)", k.Want, k.Got)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters long (got %d)", k.Want, k.Got)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d items (got %d)", k.Want, k.Got)
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d items (got %d)", k.Want, k.Got)
	case *kind.MinProperties:
		return fmt.Sprintf("must have at least %d properties (got %d)", k.Want, k.Got)
	case *kind.MaxProperties:
		return fmt.Sprintf("must have at most %d properties (got %d)", k.Want, k.Got)
	}
	return k.LocalizedString(printer)
}

// ratString writes a number as JSON would: an integer plainly, else a
// shortest decimal.
func ratString(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// pointerEscaper escapes a key as an RFC 6901 reference token.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")
