package sqs

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/backendtest"
	"github.com/owedhq/owed/internal/testenv"
)

// serverCommand is the local SQS-compatible server scripts/install-sqs.sh
// installs; OWED_SQS_SERVER names another path.
const serverCommand = "owed-sqs-server"

// startServer starts the local SQS server on a free loopback port and
// returns its endpoint; without it installed the test skips, or fails under
// make test (testenv.Missing).
func startServer(t *testing.T) string {
	t.Helper()
	path := os.Getenv("OWED_SQS_SERVER")
	if path == "" {
		path = testenv.LookPath(t, serverCommand, testenv.InstallSQS)
	}
	cmd := exec.Command(path, "--host", "127.0.0.1", "--port", "0")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if url, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				lines <- url
			}
		}
		close(lines)
	}()
	select {
	case url, ok := <-lines:
		if !ok {
			t.Fatalf("%s exited before listening", path)
		}
		return url
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not say it was listening within 30 s", path)
	}
	return ""
}

var queues atomic.Int64

// localConfig is a Config for the local server, without queues yet.
func localConfig(endpoint string) Config {
	return Config{
		Endpoint:    endpoint,
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("owed-test", "owed-test", ""),
	}
}

func openFresh(t *testing.T, endpoint string) *Client {
	t.Helper()
	ctx := context.Background()
	cfg, err := CreateQueues(ctx, localConfig(endpoint), fmt.Sprintf("owed-t%d", queues.Add(1)))
	if err != nil {
		t.Fatalf("CreateQueues: %v", err)
	}
	c, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func TestContract(t *testing.T) {
	endpoint := startServer(t)
	backendtest.Run(t, func(t *testing.T) queue.Queue { return openFresh(t, endpoint) },
		backendtest.Skip(backendtest.CaseDeadLetterPaging,
			"SQS has no cursor over a queue: a dead-letter listing is one page of up to limit messages"),
		backendtest.Skip(backendtest.CaseStatsDepths,
			"local-aws-sqs 2.0.2 counts in-flight messages in ApproximateNumberOfMessages, "+
				"which SQS reports as the messages available for retrieval only"),
	)
}

func TestNewRefusesALowMaxReceiveCount(t *testing.T) {
	endpoint := startServer(t)
	ctx := context.Background()
	c := openFresh(t, endpoint)
	attrs, err := c.attributes(ctx, c.cfg.DeadLetterQueueURL)
	if err != nil {
		t.Fatal(err)
	}
	policy := fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"5"}`, attrs["QueueArn"])
	if _, err := c.api.SetQueueAttributes(ctx, setRedrivePolicy(c.cfg.QueueURL, policy)); err != nil {
		t.Fatalf("SetQueueAttributes: %v", err)
	}
	if _, err := New(ctx, c.cfg); err == nil || !strings.Contains(err.Error(), "maxReceiveCount") {
		t.Fatalf("New on a queue with maxReceiveCount 5 = %v; want it refused", err)
	}
}

func TestNewRefusesAMissingQueue(t *testing.T) {
	endpoint := startServer(t)
	c := openFresh(t, endpoint)
	cfg := c.cfg
	cfg.QueueURL += "-missing"
	if _, err := New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "OWED_SQS_QUEUE_URL") {
		t.Fatalf("New on a missing queue = %v; want an error naming OWED_SQS_QUEUE_URL", err)
	}
}

func TestConfigErrorsNameTheVariable(t *testing.T) {
	const q = "https://sqs.eu-west-1.amazonaws.com/123456789012/owed"
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "OWED_SQS_QUEUE_URL"},
		{Config{QueueURL: q}, "OWED_SQS_DEAD_LETTER_QUEUE_URL"},
		{Config{QueueURL: q, DeadLetterQueueURL: q}, "must differ"},
		{Config{QueueURL: q + ".fifo", DeadLetterQueueURL: q + "-dl"}, "FIFO"},
		{Config{QueueURL: q, DeadLetterQueueURL: q + "-dl", Endpoint: "localhost:9324"}, "OWED_SQS_ENDPOINT"},
	} {
		_, err := New(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v; want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

func TestBodiesSQSCannotCarryAreRefusedPerMessage(t *testing.T) {
	for _, body := range [][]byte{nil, {0xff, 0xfe}, []byte("bell\a")} {
		if err := validMessage(queue.Message{Body: body}); err == nil {
			t.Errorf("validMessage(%q) accepted a body SQS refuses", body)
		}
	}
	if err := validMessage(queue.Message{Body: []byte("{\"ok\":\"tab\tnewline\n\"}")}); err != nil {
		t.Errorf("validMessage refused JSON text: %v", err)
	}
}

func setRedrivePolicy(queue, policy string) *awssqs.SetQueueAttributesInput {
	return &awssqs.SetQueueAttributesInput{
		QueueUrl:   aws.String(queue),
		Attributes: map[string]string{string(types.QueueAttributeNameRedrivePolicy): policy},
	}
}

// With OWED_SQS_FAIR_QUEUE each message carries its group (the tenant) as
// its MessageGroupId, a valid one whatever the tenant id, and goes through
// the queue as before; without it a message carries none. The server is
// asked for the group each message arrived with.
func TestAFairQueueCarriesEachTenantAsItsGroup(t *testing.T) {
	endpoint := startServer(t)
	ctx := context.Background()
	groups := map[string]string{"k1": "acme", "k2": "tenant with spaces é"}
	for _, fair := range []bool{true, false} {
		c := openFresh(t, endpoint)
		c.cfg.FairQueue = fair
		res, err := c.Publish(ctx, []queue.Message{{Key: "k1", Body: []byte(`{"a":1}`), Group: groups["k1"]},
			{Key: "k2", Body: []byte(`{"a":2}`), Group: groups["k2"]}})
		if err != nil || res[0].Err != nil || res[1].Err != nil {
			t.Fatalf("publish (fair queue %v): %+v, %v", fair, res, err)
		}
		out, err := c.api.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl: aws.String(c.cfg.QueueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 2,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId},
			AttributeNames:              []types.QueueAttributeName{types.QueueAttributeName(types.MessageSystemAttributeNameMessageGroupId)},
			MessageAttributeNames:       []string{AttrKey},
		})
		if err != nil || len(out.Messages) != 2 {
			t.Fatalf("receive (fair queue %v): %v; want both messages", fair, err)
		}
		for _, m := range out.Messages {
			want := ""
			if fair {
				want = groupID(groups[attr(m, AttrKey)])
			}
			if got := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]; got != want {
				t.Errorf("fair queue %v: message %s arrived in group %q, want %q", fair, attr(m, AttrKey), got, want)
			}
		}
	}
	for _, g := range groups {
		id := groupID(g)
		if len(id) == 0 || len(id) > 128 || strings.ContainsAny(id, " é") {
			t.Errorf("groupID(%q) = %q, not a group id SQS takes", g, id)
		}
	}
}
