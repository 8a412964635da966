package launch

import (
	"bufio"
	"strings"
	"testing"
)

func TestRespDo(t *testing.T) {
	for _, c := range []struct{ reply, want, err string }{
		{"+OK\r\n", "OK", ""},
		{":42\r\n", "42", ""},
		{"$5\r\nhe\r\nl\r\n", "he\r\nl", ""},
		{"$0\r\n\r\n", "", ""},
		{"-ERR unknown command\r\n", "", "valkey: ERR unknown command"},
		{"$-1\r\n", "", `valkey: reply "$-1"`},
		{"*1\r\n$1\r\nx\r\n", "", `valkey: unexpected reply "*1"`},
		{"$5\r\nhe", "", "unexpected EOF"},
	} {
		var sent strings.Builder
		got, err := respDo(&sent, bufio.NewReader(strings.NewReader(c.reply)), "CLUSTER", "INFO")
		if msg := ""; err != nil {
			msg = err.Error()
			if msg != c.err {
				t.Errorf("reply %q: error %q, want %q", c.reply, msg, c.err)
			}
		} else if c.err != "" || got != c.want {
			t.Errorf("reply %q: %q, %v; want %q, %q", c.reply, got, err, c.want, c.err)
		}
		if want := "*2\r\n$7\r\nCLUSTER\r\n$4\r\nINFO\r\n"; sent.String() != want {
			t.Errorf("sent %q, want %q", sent.String(), want)
		}
	}
}
