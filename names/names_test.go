package names

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	cases := []struct {
		name, value, want string
	}{
		{"plain", "billing", ""},
		{"dashes dots and digits", "orders-v2.eu_1", ""},
		{"unicode letters", "zahlungsläufe", ""},
		{"max length", strings.Repeat("q", MaxLen), ""},
		{"empty", "", "must not be empty"},
		{"too long", strings.Repeat("q", MaxLen+1), "at most 200 bytes"},
		{"slash", "a/b", "must not contain '/'"},
		{"newline", "a\nb", "control characters"},
		{"nul", "a\x00b", "control characters"},
		{"space", "a b", "white space"},
		{"invalid utf8", "a\xffb", "valid UTF-8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.value)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check(%q) = %v, want nil", tc.value, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check(%q) = %v, want an error containing %q", tc.value, err, tc.want)
			}
		})
	}
}

func TestQuoteCutsLongValuesOnRuneBoundaries(t *testing.T) {
	long := strings.Repeat("ä", 100)
	q := Quote(long)
	if !strings.Contains(q, "(200 bytes)") || strings.Contains(q, `\x`) {
		t.Fatalf("Quote(long) = %s", q)
	}
	if got := Quote("a\nb"); got != `"a\nb"` {
		t.Fatalf("Quote escapes control characters: got %s", got)
	}
}

func TestGlobEscape(t *testing.T) {
	if got := GlobEscape(`a*b?c[d]e\f{g}`); got != `a\*b\?c\[d\]e\\f{g}` {
		t.Fatalf("GlobEscape = %s", got)
	}
}
