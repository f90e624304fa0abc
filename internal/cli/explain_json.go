package cli

import (
	"reflect"
	"strings"
)

// emptyNotNull replaces every nil slice and map reachable from v with an
// empty one, except in fields marked omitempty (which encoding/json then
// leaves out). The explain --json schema promises lists, and a nil slice —
// an op without inputs, a plan without collectives, a scalar's shape —
// would otherwise be written as null. Doing it here, over the whole value,
// covers every field the report has or will get.
func emptyNotNull(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			emptyNotNull(v.Elem())
		}
	case reflect.Struct:
		t := v.Type()
		for i := range v.NumField() {
			if !t.Field(i).IsExported() {
				continue
			}
			if strings.Contains(t.Field(i).Tag.Get("json"), "omitempty") && isNil(v.Field(i)) {
				continue
			}
			fill(v.Field(i))
			emptyNotNull(v.Field(i))
		}
	case reflect.Slice:
		for i := range v.Len() {
			fill(v.Index(i))
			emptyNotNull(v.Index(i))
		}
	}
}

func isNil(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Slice, reflect.Map, reflect.Pointer, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// fill makes a nil slice or map empty; v must be settable.
func fill(v reflect.Value) {
	switch {
	case v.Kind() == reflect.Slice && v.IsNil():
		v.Set(reflect.MakeSlice(v.Type(), 0, 0))
	case v.Kind() == reflect.Map && v.IsNil():
		v.Set(reflect.MakeMap(v.Type()))
	}
}
