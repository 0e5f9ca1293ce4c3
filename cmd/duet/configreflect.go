package main

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// Config structs are plain structs with `mapstructure` tags (snake_case keys)
// and, on scalar fields, a one-line `help` tag. The functions here walk them
// to give viper a default for every key (so DUET_* variables reach every
// key), to know the valid keys, and to generate flags.

var durationType = reflect.TypeOf(time.Duration(0))

// leaf is one configurable key of a config struct.
type leaf struct {
	key   string // dotted path, e.g. sim.time_scale
	field reflect.StructField
	value reflect.Value
}

// walkLeaves calls fn for every key below prefix; nested structs are walked,
// everything else (scalars, slices, maps) is a leaf.
func walkLeaves(prefix string, v reflect.Value, fn func(leaf)) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := f.Tag.Get("mapstructure")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		fv := v.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type != durationType {
			walkLeaves(key, fv, fn)
			continue
		}
		fn(leaf{key: key, field: f, value: fv})
	}
}

// setDefaults registers every leaf of cfg as a viper default.
func setDefaults(v *viper.Viper, prefix string, cfg any) {
	walkLeaves(prefix, reflect.ValueOf(cfg), func(l leaf) { v.SetDefault(l.key, l.value.Interface()) })
}

// schema is the set of valid keys: scalars, plus containers (maps, slices)
// whose inner keys are not checked here (UnmarshalExact checks slices of
// structs; maps are free-form).
type schema struct {
	keys       map[string]bool
	containers map[string]bool
}

func schemaOf(cfg any) schema {
	s := schema{keys: map[string]bool{}, containers: map[string]bool{}}
	walkLeaves("", reflect.ValueOf(cfg), func(l leaf) {
		s.keys[l.key] = true
		if k := l.field.Type.Kind(); k == reflect.Map || k == reflect.Slice {
			s.containers[l.key] = true
		}
	})
	return s
}

func (s schema) valid(key string) bool {
	if s.keys[key] {
		return true
	}
	for parent := key; strings.Contains(parent, "."); {
		parent = parent[:strings.LastIndex(parent, ".")]
		if s.containers[parent] {
			return true
		}
	}
	return false
}

// siblings lists the valid keys directly below the deepest known section of
// key, for an error message.
func (s schema) siblings(key string) (section string, names []string) {
	parts := strings.Split(key, ".")
	for depth := len(parts) - 1; depth >= 0; depth-- {
		section = strings.Join(parts[:depth], ".")
		seen := map[string]bool{}
		for k := range s.keys {
			rest, ok := strings.CutPrefix(k, section+".")
			if section == "" {
				rest, ok = k, true
			}
			if ok {
				seen[strings.SplitN(rest, ".", 2)[0]] = true
			}
		}
		if len(seen) > 0 {
			for n := range seen {
				names = append(names, n)
			}
			sort.Strings(names)
			return section, names
		}
	}
	return "", nil
}

// checkUnknownKeys fails on the first key (in sorted order) that the
// schema does not know, naming the valid keys of its section.
func checkUnknownKeys(keys []string, s schema) error {
	sort.Strings(keys)
	for _, k := range keys {
		if s.valid(k) {
			continue
		}
		section, names := s.siblings(k)
		where := "top level"
		if section != "" {
			where = section
		}
		return fmt.Errorf("config: unknown key %s (valid keys in %s: %s)", k, where, strings.Join(names, ", "))
	}
	return nil
}

// bindSectionFlags defines one flag per scalar key of a section's config
// struct, named flagPrefix + the key in kebab-case (nested keys joined with
// "-"), with the struct's default and help text, and binds it to the
// section's key in v.
func bindSectionFlags(fs *pflag.FlagSet, v *viper.Viper, section string, cfg any, flagPrefix string) {
	walkLeaves("", reflect.ValueOf(cfg), func(l leaf) {
		help := l.field.Tag.Get("help")
		if help == "" {
			return // containers and keys without help are config-file only
		}
		name := flagPrefix + strings.NewReplacer("_", "-", ".", "-").Replace(l.key)
		if !defineFlag(fs, name, help, l.value) {
			return
		}
		if err := v.BindPFlag(section+"."+l.key, fs.Lookup(name)); err != nil {
			panic(fmt.Sprintf("bind flag %s: %v", name, err)) // programming error: the flag was just defined
		}
		_ = fs.SetAnnotation(name, sectionAnnotation, []string{section}) // the flag exists: cannot fail
	})
}

// defineFlag defines a flag of the value's kind; it reports false for kinds
// that have no flag form.
func defineFlag(fs *pflag.FlagSet, name, help string, v reflect.Value) bool {
	switch x := v.Interface().(type) {
	case string:
		fs.String(name, x, help)
	case int:
		fs.Int(name, x, help)
	case int64:
		fs.Int64(name, x, help)
	case uint64:
		fs.Uint64(name, x, help)
	case float64:
		fs.Float64(name, x, help)
	case bool:
		fs.Bool(name, x, help)
	case time.Duration:
		fs.Duration(name, x, help)
	case []string:
		fs.StringSlice(name, x, help)
	default:
		return false
	}
	return true
}
