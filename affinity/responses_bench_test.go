package affinity

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/core/openai"
)

// BenchmarkFingerprintResponses4KiB fingerprints a Responses request of about 4 KiB: input
// items of each kind (messages with and without type, a function call and its output, item
// references), the shapes each item's walk tells apart.
func BenchmarkFingerprintResponses4KiB(b *testing.B) {
	var items []string
	for i := 0; len(strings.Join(items, ",")) < 4<<10; i++ {
		items = append(items,
			fmt.Sprintf(`{"role":"user","content":%q}`, text("question", 200)),
			fmt.Sprintf(`{"type":"message","id":"msg_%d","status":"completed","role":"assistant","content":[{"type":"output_text","text":%q,"annotations":[]}]}`, i, text("answer", 200)),
			fmt.Sprintf(`{"type":"function_call","id":"fc_%d","call_id":"c%d","name":"f","arguments":"{}"}`, i, i),
			fmt.Sprintf(`{"type":"function_call_output","call_id":"c%d","output":"42"}`, i),
			fmt.Sprintf(`{"id":"msg_ref_%d"}`, i))
	}
	body := []byte(`{"model":"m","instructions":"Be brief.","input":[` + strings.Join(items, ",") + `]}`)
	var r openai.Request
	if err := openai.Peek(openai.Responses, body, &r); err != nil {
		b.Fatal(err)
	}
	var p Print
	if err := Fingerprint(openai.Responses, body, r.Prompt, r.System, &p); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := Fingerprint(openai.Responses, body, r.Prompt, r.System, &p); err != nil {
			b.Fatal(err)
		}
	}
}
