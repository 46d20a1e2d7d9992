package taskrouter

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConfigMirrorsOptions: the deprecated Config is Store followed by
// Options's fields, in order, so that Config.options and configOf copy
// field by field.
func TestConfigMirrorsOptions(t *testing.T) {
	ct, ot := reflect.TypeFor[Config](), reflect.TypeFor[Options]()
	require.Equal(t, "Store", ct.Field(0).Name)
	require.Equal(t, ot.NumField()+1, ct.NumField())
	for i := range ot.NumField() {
		require.Equal(t, ot.Field(i).Name, ct.Field(i+1).Name)
		require.Equal(t, ot.Field(i).Type, ct.Field(i+1).Type)
	}
}
