package streams

import "testing"

func TestParseIDSplitsAtTheFirstTwoSlashes(t *testing.T) {
	id, err := ParseID("default/chat/room/42")
	if err != nil || id != (ID{Provider: "default", Namespace: "chat", Key: "room/42"}) {
		t.Fatalf("ParseID: %+v, %v", id, err)
	}
	if id.String() != "default/chat/room/42" {
		t.Fatalf("String: %q", id.String())
	}
	for _, bad := range []string{"", "default", "default/chat", "default/chat/", "/chat/k", "default//k"} {
		if _, err := ParseID(bad); err == nil {
			t.Errorf("ParseID(%q) accepted it", bad)
		}
	}
}

func TestTokensOrderByEpochThenSequence(t *testing.T) {
	a, b, c := Token{Epoch: 1, Sequence: 9}, Token{Epoch: 2, Sequence: 1}, Token{Epoch: 2, Sequence: 2}
	if !a.Less(b) || !b.Less(c) || c.Less(a) || a.Less(a) {
		t.Fatal("tokens misordered")
	}
	if !(Token{}).IsZero() || a.IsZero() {
		t.Fatal("IsZero wrong")
	}
}
