package llmsim

import (
	"testing"

	json "github.com/goccy/go-json"
)

// Fuzz targets for the simulator's parsers (ParseFault's is in fault_test.go). The lead may
// mirror them in fuzz/ (package fuzz): both entry points are exported.

func FuzzParseFleetFile(f *testing.F) {
	f.Add([]byte("seed = 1\n[defaults]\nttft = \"10ms\"\n[[instance]]\nrole = \"decode\"\nlisten = \"127.0.0.1:0\"\n"))
	f.Add([]byte("[defaults]\nfault = \"reset-after=2\"\nfault_rate = 0.5\n"))
	f.Add([]byte("roles = [\"prefill\"]\ninstances = 2\n"))
	f.Add([]byte("[[instance]]\n[[instance]]\ntokens = -1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseFleetFile("fuzz.toml", data)
		if err != nil {
			return
		}
		if _, err := cfg.resolve(); err != nil {
			t.Fatalf("ParseFleetFile accepted a config resolve refuses: %v", err)
		}
	})
}

func FuzzChatPrompt(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"tools":[{"type":"function"}]}`))
	f.Add([]byte(`{"model":"m","prompt":["a","b"]}`))
	f.Add([]byte(`{"model":"m","prompt":[1,2,3],"input":"\u00e9"}`))
	f.Add([]byte(`{"model":"m","instructions":"s","input":[{"role":"user","content":[{"type":"input_text","text":"x"}]}]}`))
	f.Add([]byte(`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"x"}],"stop_sequences":["a"]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req inferRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		p := appendChatPrompt(nil, req.Messages, req.Tools)
		appendTextInput(nil, req.Prompt)
		appendTextInput(nil, req.Input)
		h := appendBlockHashes(nil, p, 16, saltHash(req.CacheSalt))
		if len(h) != len(p)/(16*BytesPerToken) {
			t.Fatalf("%d block hashes for %d bytes", len(h), len(p))
		}
		parseEmbeddingInput(req.Input)
		parseStops("stop", req.Stop, 4)
		var rr responsesRequest
		if json.Unmarshal(body, &rr) == nil {
			responsesPrompt(&rr)
			checkResponses(&rr)
		}
		var mr messagesRequest
		if json.Unmarshal(body, &mr) == nil {
			if checkMessages(&mr) == nil {
				messagesPrompt(&mr)
			}
		}
	})
}
