package slacktest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// Block Kit limits, as documented by Slack.
const (
	maxMessageBlocks  = 50
	maxViewBlocks     = 100
	maxMessageText    = 40000
	maxBlockID        = 255
	maxActionID       = 255
	maxHeaderText     = 150
	maxSectionText    = 3000
	maxSectionFields  = 10
	maxFieldText      = 2000
	maxContextElems   = 10
	maxContextText    = 3000
	maxActionsElems   = 25
	maxButtonText     = 75
	maxButtonValue    = 2000
	maxButtonURL      = 3000
	maxA11yLabel      = 75
	maxConfirmTitle   = 100
	maxConfirmText    = 300
	maxConfirmButton  = 30
	maxInputLabel     = 2000
	maxInputHint      = 2000
	maxPlaceholder    = 150
	maxInputValue     = 3000
	maxViewTitle      = 24
	maxViewButton     = 24
	maxCallbackID     = 255
	maxPrivateMeta    = 3000
	maxExternalID     = 255
	maxImageAltText   = 2000
	maxImageURL       = 3000
	surfaceMessage    = "message"
	surfaceModal      = "modal"
	textPlain         = "plain_text"
	textMrkdwn        = "mrkdwn"
	anyText           = "any"
	errInvalidBlocks  = "invalid_blocks"
	errInvalidArgs    = "invalid_arguments"
	errInvalidJSON    = "invalid_json"
	errJSONNotObject  = "json_not_object"
	errNoText         = "no_text"
	errMsgTooLong     = "msg_too_long"
	errChannelMissing = "channel_not_found"
)

// units is a string's length as Slack counts it at most: UTF-16 code units.
func units(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// decodeJSON decodes raw keeping numbers as written.
func decodeJSON(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("data after the JSON value")
	}
	return v, nil
}

// checker collects Block Kit errors, worded like Slack's: "[ERROR] <what>
// [json-pointer:<where>]".
type checker struct {
	surface   string
	errs      []string
	blockIDs  map[string]string // block_id → the block's JSON
	actionIDs map[string]bool
}

func newChecker(surface string) *checker {
	return &checker{surface: surface, blockIDs: map[string]string{}, actionIDs: map[string]bool{}}
}

func (c *checker) fail(ptr, format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf("[ERROR] "+format+" [json-pointer:%s]", append(args, ptr)...))
}

// object checks v is an object with only the allowed fields.
func (c *checker) object(v any, ptr string, allowed ...string) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		c.fail(ptr, "must provide an object")
		return nil, false
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !contains(allowed, k) {
			c.fail(ptr+"/"+k, "unknown field %q", k)
		}
	}
	return m, true
}

// str checks m[key] is a string of at most max units (0: no limit),
// non-empty when present; required says it must be present.
func (c *checker) str(m map[string]any, key, ptr string, max int, required bool) (string, bool) {
	v, ok := m[key]
	if !ok {
		if required {
			c.fail(ptr, "missing required field: %s", key)
		}
		return "", false
	}
	s, isStr := v.(string)
	switch {
	case !isStr:
		c.fail(ptr+"/"+key, "must be a string")
		return "", false
	case s == "":
		c.fail(ptr+"/"+key, "must be more than 0 characters")
	case max > 0 && units(s) > max:
		c.fail(ptr+"/"+key, "must be less than %d characters", max+1)
	}
	return s, true
}

func (c *checker) boolean(m map[string]any, key, ptr string) {
	if v, ok := m[key]; ok {
		if _, isBool := v.(bool); !isBool {
			c.fail(ptr+"/"+key, "must be a boolean")
		}
	}
}

func (c *checker) integer(m map[string]any, key, ptr string, lo, hi int64) (int64, bool) {
	v, ok := m[key]
	if !ok {
		return 0, false
	}
	n, isNum := v.(json.Number)
	i, err := n.Int64()
	if !isNum || err != nil || i < lo || i > hi {
		c.fail(ptr+"/"+key, "must be an integer from %d to %d", lo, hi)
		return 0, false
	}
	return i, true
}

// text checks a text object of kind (plain_text, mrkdwn or any) whose text
// is at most max units.
func (c *checker) text(v any, ptr, kind string, max int) {
	m, ok := v.(map[string]any)
	if !ok {
		c.fail(ptr, "must provide an object")
		return
	}
	typ, _ := m["type"].(string)
	switch {
	case typ == textPlain && (kind == textPlain || kind == anyText):
		c.object(m, ptr, "type", "text", "emoji")
		c.boolean(m, "emoji", ptr)
	case typ == textMrkdwn && (kind == textMrkdwn || kind == anyText):
		c.object(m, ptr, "type", "text", "verbatim")
		c.boolean(m, "verbatim", ptr)
	case typ == textPlain || typ == textMrkdwn:
		c.fail(ptr+"/type", "must be %s", kind)
		return
	default:
		c.fail(ptr+"/type", "must be a valid enum value (plain_text, mrkdwn)")
		return
	}
	c.str(m, "text", ptr, max, true)
}

// optionalText checks m[key], when present, as a text object.
func (c *checker) optionalText(m map[string]any, key, ptr, kind string, max int) {
	if v, ok := m[key]; ok {
		c.text(v, ptr+"/"+key, kind, max)
	}
}

func (c *checker) requiredText(m map[string]any, key, ptr, kind string, max int) {
	v, ok := m[key]
	if !ok {
		c.fail(ptr, "missing required field: %s", key)
		return
	}
	c.text(v, ptr+"/"+key, kind, max)
}

// blocks checks a blocks array of the checker's surface.
func (c *checker) blocks(v any, ptr string) {
	arr, ok := v.([]any)
	if !ok {
		c.fail(ptr, "must provide an array")
		return
	}
	limit := maxMessageBlocks
	if c.surface == surfaceModal {
		limit = maxViewBlocks
	}
	if len(arr) > limit {
		c.fail(ptr, "no more than %d items allowed", limit)
	}
	for i, b := range arr {
		c.block(b, fmt.Sprintf("%s/%d", ptr, i))
	}
}

func (c *checker) block(v any, ptr string) {
	m, ok := v.(map[string]any)
	if !ok {
		c.fail(ptr, "must provide an object")
		return
	}
	typ, _ := m["type"].(string)
	switch typ {
	case "header":
		c.object(m, ptr, "type", "block_id", "text")
		c.requiredText(m, "text", ptr, textPlain, maxHeaderText)
	case "section":
		c.sectionBlock(m, ptr)
	case "context":
		c.contextBlock(m, ptr)
	case "actions":
		c.object(m, ptr, "type", "block_id", "elements")
		arr := c.elements(m, ptr, maxActionsElems)
		for i, e := range arr {
			c.button(e, fmt.Sprintf("%s/elements/%d", ptr, i))
		}
	case "divider":
		c.object(m, ptr, "type", "block_id")
	case "input":
		if !c.inputBlock(m, ptr) {
			return
		}
	default:
		c.fail(ptr+"/type", "unsupported block type %q (the fake knows header, section, context, actions, divider, input)", typ)
		return
	}
	c.blockID(m, ptr)
}

// sectionBlock checks a section: text or fields (1 to maxSectionFields),
// and a button as accessory.
func (c *checker) sectionBlock(m map[string]any, ptr string) {
	c.object(m, ptr, "type", "block_id", "text", "fields", "accessory", "expand")
	c.optionalText(m, "text", ptr, anyText, maxSectionText)
	c.boolean(m, "expand", ptr)
	fields, hasFields := m["fields"]
	if _, hasText := m["text"]; !hasText && !hasFields {
		c.fail(ptr, "must provide text or fields")
	}
	if hasFields {
		arr, ok := fields.([]any)
		switch {
		case !ok:
			c.fail(ptr+"/fields", "must provide an array")
		case len(arr) == 0:
			c.fail(ptr+"/fields", "must provide at least 1 item")
		case len(arr) > maxSectionFields:
			c.fail(ptr+"/fields", "no more than %d items allowed", maxSectionFields)
		}
		for i, f := range arr {
			c.text(f, fmt.Sprintf("%s/fields/%d", ptr, i), anyText, maxFieldText)
		}
	}
	if acc, ok := m["accessory"]; ok {
		c.button(acc, ptr+"/accessory")
	}
}

// contextBlock checks a context block: texts and images.
func (c *checker) contextBlock(m map[string]any, ptr string) {
	c.object(m, ptr, "type", "block_id", "elements")
	arr := c.elements(m, ptr, maxContextElems)
	for i, e := range arr {
		eptr := fmt.Sprintf("%s/elements/%d", ptr, i)
		if em, ok := e.(map[string]any); ok && em["type"] == "image" {
			c.object(em, eptr, "type", "image_url", "alt_text")
			if u, ok := c.str(em, "image_url", eptr, maxImageURL, true); ok && !validURL(u) {
				c.fail(eptr+"/image_url", "must be a valid URL")
			}
			c.str(em, "alt_text", eptr, maxImageAltText, true)
			continue
		}
		c.text(e, eptr, anyText, maxContextText)
	}
}

// inputBlock checks an input block, which only a modal may have; it
// reports false when the surface refuses input blocks altogether.
func (c *checker) inputBlock(m map[string]any, ptr string) bool {
	if c.surface != surfaceModal {
		c.fail(ptr+"/type", "input blocks are only allowed in modals and home tabs")
		return false
	}
	c.object(m, ptr, "type", "block_id", "label", "element", "hint", "optional", "dispatch_action")
	c.requiredText(m, "label", ptr, textPlain, maxInputLabel)
	c.optionalText(m, "hint", ptr, textPlain, maxInputHint)
	c.boolean(m, "optional", ptr)
	c.boolean(m, "dispatch_action", ptr)
	if el, ok := m["element"]; ok {
		c.plainTextInput(el, ptr+"/element")
	} else {
		c.fail(ptr, "missing required field: element")
	}
	return true
}

// blockID checks a block's block_id, unique on its surface, and remembers
// the block under it.
func (c *checker) blockID(m map[string]any, ptr string) {
	if _, ok := m["block_id"]; !ok {
		return
	}
	if id, ok := c.str(m, "block_id", ptr, maxBlockID, false); ok && id != "" {
		if _, dup := c.blockIDs[id]; dup {
			c.fail(ptr+"/block_id", "duplicate block_id %q", id)
		}
		raw, _ := json.Marshal(m)
		c.blockIDs[id] = string(raw)
	}
}

// elements checks a block's elements array has 1 to max items.
func (c *checker) elements(m map[string]any, ptr string, max int) []any {
	v, ok := m["elements"]
	if !ok {
		c.fail(ptr, "missing required field: elements")
		return nil
	}
	arr, ok := v.([]any)
	switch {
	case !ok:
		c.fail(ptr+"/elements", "must provide an array")
		return nil
	case len(arr) == 0:
		c.fail(ptr+"/elements", "must provide at least 1 item")
	case len(arr) > max:
		c.fail(ptr+"/elements", "no more than %d items allowed", max)
	}
	return arr
}

func (c *checker) actionID(m map[string]any, ptr string, required bool) {
	id, ok := c.str(m, "action_id", ptr, maxActionID, required)
	if !ok || id == "" {
		return
	}
	if c.actionIDs[id] {
		c.fail(ptr+"/action_id", "duplicate action_id %q", id)
	}
	c.actionIDs[id] = true
}

func (c *checker) button(v any, ptr string) {
	m, ok := v.(map[string]any)
	if !ok {
		c.fail(ptr, "must provide an object")
		return
	}
	if m["type"] != "button" {
		c.fail(ptr+"/type", "unsupported element type (the fake knows button)")
		return
	}
	c.object(m, ptr, "type", "text", "action_id", "url", "value", "style", "confirm", "accessibility_label")
	c.requiredText(m, "text", ptr, textPlain, maxButtonText)
	c.actionID(m, ptr, false)
	c.str(m, "value", ptr, maxButtonValue, false)
	if u, ok := c.str(m, "url", ptr, maxButtonURL, false); ok && !validURL(u) {
		c.fail(ptr+"/url", "must be a valid URL")
	}
	c.str(m, "accessibility_label", ptr, maxA11yLabel, false)
	if s, ok := c.str(m, "style", ptr, 0, false); ok && s != "primary" && s != "danger" {
		c.fail(ptr+"/style", "must be a valid enum value (primary, danger)")
	}
	if conf, ok := m["confirm"]; ok {
		c.confirm(conf, ptr+"/confirm")
	}
}

func (c *checker) confirm(v any, ptr string) {
	m, ok := c.object(v, ptr, "title", "text", "confirm", "deny", "style")
	if !ok {
		return
	}
	c.requiredText(m, "title", ptr, textPlain, maxConfirmTitle)
	c.requiredText(m, "text", ptr, textPlain, maxConfirmText)
	c.requiredText(m, "confirm", ptr, textPlain, maxConfirmButton)
	c.requiredText(m, "deny", ptr, textPlain, maxConfirmButton)
	if s, ok := c.str(m, "style", ptr, 0, false); ok && s != "primary" && s != "danger" {
		c.fail(ptr+"/style", "must be a valid enum value (primary, danger)")
	}
}

func (c *checker) plainTextInput(v any, ptr string) {
	m, ok := v.(map[string]any)
	if !ok {
		c.fail(ptr, "must provide an object")
		return
	}
	if m["type"] != "plain_text_input" {
		c.fail(ptr+"/type", "unsupported element type (the fake knows plain_text_input)")
		return
	}
	c.object(m, ptr, "type", "action_id", "placeholder", "initial_value", "multiline",
		"min_length", "max_length", "dispatch_action_config", "focus_on_load")
	c.actionID(m, ptr, false)
	c.optionalText(m, "placeholder", ptr, textPlain, maxPlaceholder)
	c.boolean(m, "multiline", ptr)
	c.boolean(m, "focus_on_load", ptr)
	lo, hasLo := c.integer(m, "min_length", ptr, 0, maxInputValue)
	hi, hasHi := c.integer(m, "max_length", ptr, 1, maxInputValue)
	if hasLo && hasHi && lo > hi {
		c.fail(ptr+"/min_length", "must not be more than max_length")
	}
	if iv, ok := c.str(m, "initial_value", ptr, maxInputValue, false); ok {
		if hasHi && int64(units(iv)) > hi {
			c.fail(ptr+"/initial_value", "must not be longer than max_length")
		}
	}
	if dac, ok := m["dispatch_action_config"]; ok {
		c.object(dac, ptr+"/dispatch_action_config", "trigger_actions_on")
	}
}

// view checks a modal view object.
func (c *checker) view(v any, ptr string) map[string]any {
	m, ok := c.object(v, ptr, "type", "title", "blocks", "close", "submit", "private_metadata",
		"callback_id", "clear_on_close", "notify_on_close", "external_id", "submit_disabled")
	if !ok {
		return nil
	}
	if m["type"] != "modal" {
		c.fail(ptr+"/type", "must be a valid enum value (modal)")
	}
	c.requiredText(m, "title", ptr, textPlain, maxViewTitle)
	c.optionalText(m, "close", ptr, textPlain, maxViewButton)
	c.optionalText(m, "submit", ptr, textPlain, maxViewButton)
	c.str(m, "callback_id", ptr, maxCallbackID, false)
	c.str(m, "external_id", ptr, maxExternalID, false)
	if pm, ok := m["private_metadata"]; ok {
		if s, isStr := pm.(string); !isStr {
			c.fail(ptr+"/private_metadata", "must be a string")
		} else if units(s) > maxPrivateMeta {
			c.fail(ptr+"/private_metadata", "must be less than %d characters", maxPrivateMeta+1)
		}
	}
	for _, k := range []string{"clear_on_close", "notify_on_close", "submit_disabled"} {
		c.boolean(m, k, ptr)
	}
	blocks, ok := m["blocks"]
	if !ok {
		c.fail(ptr, "missing required field: blocks")
		return m
	}
	c.blocks(blocks, ptr+"/blocks")
	if _, hasSubmit := m["submit"]; !hasSubmit {
		if arr, ok := blocks.([]any); ok {
			for _, b := range arr {
				if bm, ok := b.(map[string]any); ok && bm["type"] == "input" {
					c.fail(ptr+"/submit", "a view with input blocks needs a submit button")
					break
				}
			}
		}
	}
	return m
}

// reusedBlockIDs lists block ids of the new version of a message that the
// replaced version used for other content.
func reusedBlockIDs(old json.RawMessage, now *checker) []string {
	prev := newChecker(surfaceMessage)
	if v, err := decodeJSON(old); err == nil && v != nil {
		prev.blocks(v, "/blocks")
	}
	var out []string
	for id, content := range now.blockIDs {
		if was, ok := prev.blockIDs[id]; ok && was != content {
			out = append(out, fmt.Sprintf("[ERROR] block_id %q was used by the replaced version of this message for other content; use a new block_id when a message changes [json-pointer:/blocks]", id))
		}
	}
	sort.Strings(out)
	return out
}

func validURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && !strings.ContainsAny(s, " \n")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
