package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/countersign/countersign/contracts"
)

// MaxBodyBytes is the largest request body accepted.
const MaxBodyBytes = 1 << 20

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// decodeBody reads the request body strictly into dst (a pointer to a
// struct): unknown fields, wrong types, trailing data and bodies over
// MaxBodyBytes are refused with the JSON path of the offending field. An
// empty body decodes as {} when allowEmpty is set.
func decodeBody(w http.ResponseWriter, r *http.Request, dst any, allowEmpty bool) *Error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "the request body exceeds %d bytes", MaxBodyBytes)
		}
		return errorf(http.StatusBadRequest, CodeInvalidJSON, "the request body could not be read")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if allowEmpty {
			return nil
		}
		return errorf(http.StatusBadRequest, CodeInvalidJSON, "the request body is empty; a JSON object is expected")
	}
	return decodeStrict(data, dst)
}

// decodeStrict checks data against dst's type, then decodes it. An object
// that repeats a key anywhere, nested ones included, is refused with the
// key's path: readers would disagree on which value counts.
func decodeStrict(data []byte, dst any) *Error {
	checked := contracts.CheckIJSON(data)
	if big, ok := errors.AsType[*contracts.UnsafeIntegerError](checked); ok {
		// I-JSON: what an approver sees, what is hashed and what runs must
		// be the same number.
		code := CodeInvalidField
		if f := rawField(reflect.TypeOf(dst), big.Path); f == "arguments" || f == "content" {
			code = CodeInvalidArguments
		}
		return fieldError(http.StatusBadRequest, code, big.Path,
			"integer %s is beyond ±(2^53−1): JSON numbers beyond it are rounded, so it cannot be approved exactly; send it as a string", big.Text)
	}
	if dup, ok := errors.AsType[*contracts.DuplicateKeyError](checked); ok {
		// Within free-form JSON the code is the one that value's other
		// faults get.
		code := CodeInvalidJSON
		switch rawField(reflect.TypeOf(dst), dup.Path) {
		case "arguments", "content": // a tool call's or an edit's arguments, an answer
			code = CodeInvalidArguments
		case "schema":
			code = CodeInvalidSchema
		}
		return fieldError(http.StatusBadRequest, code, dup.Path, "duplicate key %q: a key may appear only once in an object", dup.Path)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return errorf(http.StatusBadRequest, CodeInvalidJSON, "malformed JSON: %s", syntaxMessage(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errorf(http.StatusBadRequest, CodeInvalidJSON, "malformed JSON: unexpected data after the top-level value")
	}
	if checked != nil { // not expected: encoding/json accepted what the checker refused
		return errorf(http.StatusBadRequest, CodeInvalidJSON, "malformed JSON: %v", checked)
	}
	if e := checkValue(tree, reflect.TypeOf(dst).Elem(), ""); e != nil {
		return e
	}
	strict := json.NewDecoder(bytes.NewReader(data))
	strict.DisallowUnknownFields()
	if err := strict.Decode(dst); err != nil {
		return errorf(http.StatusBadRequest, CodeInvalidJSON, "the request body does not match the expected shape: %v", err)
	}
	return nil
}

// rawField returns the JSON name of the json.RawMessage field of type t
// that path leads into, past the raw value itself (free-form JSON such as
// tool arguments), or "" if it leads into none.
func rawField(t reflect.Type, path string) string {
	name := ""
	for path != "" {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t == rawMessageType {
			return name
		}
		if path[0] == '[' {
			end := strings.IndexByte(path, ']')
			if end < 0 || t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
				return ""
			}
			t, path = t.Elem(), path[end+1:]
			continue
		}
		path = strings.TrimPrefix(path, ".")
		end := strings.IndexAny(path, ".[")
		if end < 0 {
			end = len(path)
		}
		name = path[:end]
		switch t.Kind() {
		case reflect.Struct:
			ft, ok := jsonFields(t)[name]
			if !ok {
				return ""
			}
			t = ft
		case reflect.Map:
			t = t.Elem()
		default:
			return ""
		}
		path = path[end:]
	}
	return ""
}

func syntaxMessage(err error) string {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return syn.Error() + " (at byte " + strconv.FormatInt(syn.Offset, 10) + ")"
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of input"
	}
	return err.Error()
}

// checkValue walks a decoded JSON value alongside the Go type it will be
// decoded into. Field names must match their JSON names exactly (the
// standard decoder would also accept other letter cases). null is accepted
// everywhere and means "absent".
func checkValue(v any, t reflect.Type, path string) *Error {
	if v == nil || t == rawMessageType {
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return checkValue(v, t.Elem(), path)
	case reflect.Interface:
		return nil
	case reflect.Struct:
		return checkStruct(v, t, path)
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok || t.Key().Kind() != reflect.String {
			return typeError(path, "an object")
		}
		for k, e := range obj {
			if err := checkValue(e, t.Elem(), joinPath(path, k)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice, reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			return typeError(path, "an array")
		}
		for i, e := range arr {
			if err := checkValue(e, t.Elem(), path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		return nil
	}
	return checkScalar(v, t, path)
}

// checkStruct checks an object against a struct: every key must be one of
// its JSON field names, and every value its field's type.
func checkStruct(v any, t reflect.Type, path string) *Error {
	obj, ok := v.(map[string]any)
	if !ok {
		return typeError(path, "an object")
	}
	fields := jsonFields(t)
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ft, ok := fields[k]
		if !ok {
			return fieldError(http.StatusBadRequest, CodeUnknownField, joinPath(path, k), "unknown field %q", joinPath(path, k))
		}
		if e := checkValue(obj[k], ft, joinPath(path, k)); e != nil {
			return e
		}
	}
	return nil
}

// checkScalar checks a string, boolean or number against its Go type,
// numbers within the type's range.
func checkScalar(v any, t reflect.Type, path string) *Error {
	switch t.Kind() {
	case reflect.String:
		if _, ok := v.(string); !ok {
			return typeError(path, "a string")
		}
		return nil
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return typeError(path, "a boolean")
		}
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return checkNumber(v, path, "an integer", func(n string) error { _, err := strconv.ParseInt(n, 10, t.Bits()); return err })
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return checkNumber(v, path, "a non-negative integer", func(n string) error { _, err := strconv.ParseUint(n, 10, t.Bits()); return err })
	case reflect.Float32, reflect.Float64:
		return checkNumber(v, path, "a number", func(n string) error { _, err := strconv.ParseFloat(n, t.Bits()); return err })
	}
	return typeError(path, "a supported value")
}

// checkNumber checks that v is a JSON number that parse accepts.
func checkNumber(v any, path, want string, parse func(string) error) *Error {
	n, ok := v.(json.Number)
	if !ok {
		return typeError(path, want)
	}
	if parse(n.String()) != nil {
		return typeError(path, want+" in range")
	}
	return nil
}

func typeError(path, want string) *Error {
	if path == "" {
		return errorf(http.StatusBadRequest, CodeInvalidJSON, "the request body must be %s", want)
	}
	return fieldError(http.StatusBadRequest, CodeInvalidJSON, path, "%s must be %s", path, want)
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// jsonFields maps the JSON names of t's exported fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for f := range t.Fields() {
		if f.Anonymous && f.Type.Kind() == reflect.Struct && f.Tag.Get("json") == "" {
			// An embedded struct's fields are the outer object's, as
			// encoding/json decodes them.
			for k, v := range jsonFields(f.Type) {
				m[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("json"); ok {
			tagName, _, _ := strings.Cut(tag, ",")
			if tagName == "-" {
				continue
			}
			if tagName != "" {
				name = tagName
			}
		}
		m[name] = f.Type
	}
	fieldCache.Store(t, m)
	return m
}
