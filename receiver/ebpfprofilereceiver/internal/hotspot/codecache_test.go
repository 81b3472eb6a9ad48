package hotspot

import "testing"

func TestExternalMethodName(t *testing.T) {
	for _, tc := range []struct {
		class, method, descriptor, want string
	}{
		{"Hot", "mix", "(J)J", "long Hot.mix(long)"},
		{"java/util/HashMap", "put", "(Ljava/lang/Object;Ljava/lang/Object;)Ljava/lang/Object;", "java.lang.Object java.util.HashMap.put(java.lang.Object, java.lang.Object)"},
		{"Main", "main", "([Ljava/lang/String;)V", "void Main.main(java.lang.String[])"},
		{"A", "m", "(BCDFISZ[[I)[B", "byte[] A.m(byte, char, double, float, int, short, boolean, int[][])"},
		{"A$B", "<init>", "()V", "void A$B.<init>()"},
	} {
		got, err := ExternalMethodName(tc.class, tc.method, tc.descriptor)
		if err != nil || got != tc.want {
			t.Errorf("%s %s %s: %q %v, want %q", tc.class, tc.method, tc.descriptor, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "J", "(J", "(Q)V", "(Ljava/lang/String)V", "([)V", "(J)", "(J)JJ"} {
		if got, err := ExternalMethodName("A", "m", bad); err == nil {
			t.Errorf("descriptor %q: %q, want an error", bad, got)
		}
	}
}
