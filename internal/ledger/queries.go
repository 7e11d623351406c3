package ledger

import (
	_ "embed"

	"github.com/owedhq/owed/internal/sqlfile"
)

// queriesSQL is every statement the ledger runs, by name, with what each
// does: sql/queries.sql (docs/sql.md). Each is bound to a variable below or
// beside its caller when the package is initialised, so a name the file
// lacks fails every test of the package.
//
//go:embed sql/queries.sql
var queriesSQL string

var queries = sqlfile.MustParse("internal/ledger/sql/queries.sql", queriesSQL)

var (
	qSchedule            = queries.Get("Schedule")
	qFindScheduled       = queries.Get("FindScheduled")
	qCancel              = queries.Get("Cancel")
	qCountInFlight       = queries.Get("CountInFlight")
	qReschedule          = queries.Get("Reschedule")
	qLeaseFair           = queries.Get("LeaseFair")
	qExplainLease        = queries.Get("ExplainLease")
	qExpireOverdue       = queries.Get("ExpireOverdue")
	qMarkQueued          = queries.Get("MarkQueued")
	qReleaseLeased       = queries.Get("ReleaseLeased")
	qExpireUnclaimed     = queries.Get("ExpireUnclaimed")
	qSettleExpired       = queries.Get("SettleExpired")
	qClaimMany           = queries.Get("ClaimMany")
	qSettleDeliveredMany = queries.Get("SettleDeliveredMany")
	qExtendMany          = queries.Get("ExtendMany")
	qSettleSkipped       = queries.Get("SettleSkipped")
	qSettleFailed        = queries.Get("SettleFailed")
	qReleaseClaim        = queries.Get("ReleaseClaim")
	qHandBackClaim       = queries.Get("HandBackClaim")
	qRedrive             = queries.Get("Redrive")
	qRecordAttempt       = queries.Get("RecordAttempt")
	qGet                 = queries.Get("Get")
	qAttempts            = queries.Get("Attempts")
	qBacklog             = queries.Get("Backlog")
	qStats               = queries.Get("Stats")
	qTenantsOf           = queries.Get("TenantsOf")
	qAudit               = queries.Get("Audit")
	qLeasableFair        = queries.Get("LeasableFair")
	qSurveyFair          = queries.Get("SurveyFair")
	qSendRates           = queries.Get("SendRates")
)
