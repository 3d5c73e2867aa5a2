package request_test

import (
	"reflect"
	"testing"

	"mediator/shared/request"
)

func TestHeartbeat(t *testing.T) {
	t.Parallel()
	p, errs := request.Heartbeat("n1", []byte(`{"boot_id":"b-1","labels":["z","a","z"],"draining":true}`))
	if errs != nil || p.NodeID != "n1" || p.BootID != "b-1" || !p.Draining || !reflect.DeepEqual(p.Labels, []string{"a", "z"}) {
		t.Fatalf("%+v %v", p, errs)
	}
	for name, body := range map[string]string{
		"no boot":       `{"labels":[]}`,
		"bad boot":      `{"boot_id":"a b"}`,
		"unknown field": `{"boot_id":"b","lables":[]}`,
		"bad label":     `{"boot_id":"b","labels":["=x"]}`,
		"not a list":    `{"boot_id":"b","labels":"x"}`,
		"draining text": `{"boot_id":"b","draining":"yes"}`,
	} {
		if _, errs := request.Heartbeat("n1", []byte(body)); errs == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
