package main

import (
	"fmt"
	"reflect"
	"strings"
	"time"
)

// The configuration reference (docs/configuration.md) is generated from the
// config structs: every key with its type, default and description (the
// field's `help` tag, else its `doc` tag for keys that get no flag).
// TestConfigurationReference keeps the file equal to what this writes and
// fails on a key without a description.

// refRow is one key of the reference.
type refRow struct {
	key, typ, def, doc string
}

// referenceRows returns the keys of cfg (a config struct) under prefix, in
// field order: nested structs are walked, a slice of structs as key[].field.
func referenceRows(prefix string, v reflect.Value) []refRow {
	var rows []refRow
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name := f.Tag.Get("mapstructure")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		rows = append(rows, fieldRows(joinKey(prefix, name), f, v.Field(i))...)
	}
	return rows
}

// fieldRows returns the rows of field f, keyed key, with value fv.
func fieldRows(key string, f reflect.StructField, fv reflect.Value) []refRow {
	switch {
	case f.Type.Kind() == reflect.Struct && f.Type != durationType:
		return referenceRows(key, fv)
	case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
		rows := []refRow{{key: key, typ: "list", def: listDefault(fv), doc: fieldDoc(f)}}
		for _, r := range referenceRows(key+"[]", reflect.New(f.Type.Elem()).Elem()) {
			r.def = "" // an item's field has no default of its own: its zero value is said in its description
			rows = append(rows, r)
		}
		return rows
	}
	return []refRow{{key: key, typ: typeName(f.Type), def: defaultText(fv), doc: fieldDoc(f)}}
}

func joinKey(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// fieldDoc is a field's description: its help tag, else its doc tag.
func fieldDoc(f reflect.StructField) string {
	if h := f.Tag.Get("help"); h != "" {
		return h
	}
	return f.Tag.Get("doc")
}

func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t.Kind() == reflect.Slice:
		return "list of " + typeName(t.Elem())
	case t.Kind() == reflect.Map:
		return "map"
	case t.Kind() == reflect.Float64:
		return "number"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "integer"
	}
	return t.Kind().String()
}

// defaultText renders a default value as YAML would read it.
func defaultText(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case time.Duration:
		return x.String()
	case string:
		if x == "" {
			return `""`
		}
		return x
	}
	switch v.Kind() {
	case reflect.Slice:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = defaultText(v.Index(i))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case reflect.Map:
		if v.Len() == 0 {
			return "{}"
		}
		return fmt.Sprint(v.Interface())
	}
	return fmt.Sprint(v.Interface())
}

// listDefault renders a default list of structs by the elements' first
// field (their names).
func listDefault(v reflect.Value) string {
	if v.Len() == 0 {
		return "[]"
	}
	parts := make([]string, v.Len())
	for i := range parts {
		parts[i] = defaultText(v.Index(i).Field(0))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// configReference renders the reference tables of cfg, one per top-level
// section, in field order.
func configReference(cfg Config) string {
	var b strings.Builder
	v := reflect.ValueOf(cfg)
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		section := f.Tag.Get("mapstructure")
		if section == "" || !f.IsExported() {
			continue
		}
		fmt.Fprintf(&b, "\n### `%s`\n\n| key | type | default | what it does |\n|---|---|---|---|\n", section)
		for _, r := range fieldRows(section, f, v.Field(i)) {
			def := "`" + escapeCell(r.def) + "`"
			if r.def == "" {
				def = "—"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.key, r.typ, def, escapeCell(r.doc))
		}
	}
	return b.String()
}

// escapeCell keeps a table cell on one row.
func escapeCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
