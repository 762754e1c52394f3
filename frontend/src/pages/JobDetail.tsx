/**
 * One job, live over SSE: health, ETA and cost, throughput, reward/KL, any recorded metric (MetricPanels), reward errors, long-tail lengths (and, for multi-turn jobs,
 * turns per episode beside them), staleness, pipeline timeline, scaling, samples; exports, spec YAML and clone. The iteration charts zoom together (drag one, all follow) and
 * share one view (ChartControls: x by iteration, samples or wall time; smoothing; log scale; zero baseline).
 */
import { useEffect, useMemo, useState, type ReactNode } from "react";
import { Link, useNavigate, useParams } from "react-router";
import { api, ApiError, unwrap } from "../api/client";
import { HealthBadge, HealthBanner, SignalList } from "../components/HealthBadge";
import { LengthHistogram } from "../components/LengthHistogram";
import { TurnsHistogram } from "../components/TurnsHistogram";
import { ChartControls } from "../components/ChartControls";
import { LineChart, type LineSeries } from "../components/LineChart";
import { PipelineTimeline } from "../components/PipelineTimeline";
import { WholeJobTimeline } from "../components/WholeJobTimeline";
import { Card, ErrorBanner, formatNumber, formatTime, Progress, SharedBadge, SharedTrainingBadge, StatusBadge } from "../components/ui";
import { formatDuration } from "../lib/runs";
import { playgroundRoute } from "../lib/playground";
import { jobSpec } from "../api/types";
import { iterationToX, metricPoints, REWARD_MIN_SPAN, X_LABELS, xByIteration } from "../lib/chartView";
import { useChartView } from "../lib/useChartView";
import { recentIterationLengths } from "../lib/histogram";
import { latestIterationTurns, sampleTurns } from "../lib/turns";
import { scaleMarkers } from "../lib/markers";
import { useJobHealth } from "../lib/queries";
import { currentRate, liveIndicator } from "../lib/health";
import { useJobLive } from "../lib/useJobLive";
import { useSession } from "../session";
import { Checkpoints } from "./Checkpoints";
import { EventsLog } from "./EventsLog";
import { JobNotes } from "./JobNotes";
import { JobEta } from "./JobEta";
import { JobLimits } from "./JobLimits";
import { MetricPanels } from "./MetricPanels";
import { ExportMenu, SpecYaml } from "./JobTools";
import { SampleBrowser } from "./SampleBrowser";
import { ScalingPanel } from "./ScalingPanel";

const COLORS = { blue: "#2563eb", green: "#059669", orange: "#ea580c", purple: "#7c3aed", grey: "#64748b", red: "#dc2626" };

type Action = "pause" | "resume" | "cancel";
const ACTIONS: Record<Action, string[]> = {
  pause: ["running"],
  resume: ["paused"],
  cancel: ["queued", "starting", "running", "paused", "parked"],
};

export function JobDetailPage() {
  const jobId = Number(useParams().jobId);
  const live = useJobLive(jobId);
  const health = useJobHealth(jobId, live.job?.status).data;
  const navigate = useNavigate();
  const [showYaml, setShowYaml] = useState(false);
  const { canWrite } = useSession();
  const [actionError, setActionError] = useState<unknown>(null);
  const [now, setNow] = useState(() => Date.now() / 1000);
  const [view, setView] = useChartView(); // x axis, smoothing, log scale, zero baseline: in the URL (shareable)

  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now() / 1000), 1000);
    return () => clearInterval(timer);
  }, []);

  const series = useMemo(() => {
    const s = (key: string, label: string, color: string, axis?: "left" | "right"): LineSeries => ({
      label,
      color,
      axis,
      points: metricPoints(live.iterations, key, view.x),
    });
    return {
      throughput: [s("samples_per_s", "samples/s", COLORS.blue), s("tokens_per_s", "tokens/s", COLORS.green, "right")],
      // eval_reward: the held-out reward (training.eval_every), beside the training reward on the same axis
      reward: [s("reward_mean", "reward", COLORS.green), s("eval_reward", "held-out reward", COLORS.blue), s("kl", "KL", COLORS.purple, "right")],
      staleness: [s("staleness_mean", "mean staleness", COLORS.orange), s("stale_dropped", "stale dropped", COLORS.red, "right")],
      // training-inference mismatch of the on-policy tokens (workers/training/mismatch.py)
      mismatch: [
        s("mismatch_kl", "mismatch KL (k3)", COLORS.red),
        s("mismatch_abs_mean", "mean |Δlogp|", COLORS.orange),
        s("mismatch_out_fraction", "tokens outside [1/c, c]", COLORS.purple, "right"),
      ],
      time: [
        s("gen_seconds", "generation s", COLORS.blue),
        s("train_seconds", "training s", COLORS.green),
        s("trainer_idle_seconds", "trainer idle s", COLORS.grey),
        s("weight_sync_seconds", "weight sync s", COLORS.orange),
        s("reward_seconds", "reward / grader s", COLORS.red), // scoring on the instances (judges, reward models)
      ],
      skew: [s("skew_p99_p50", "p99/p50 skew", COLORS.orange), s("len_p99", "p99 length", COLORS.purple, "right")],
      // grouped speculative decoding (generation.speculative): draft acceptance, tokens per forward, the tail's length
      speculation: [
        s("spec_acceptance", "draft acceptance", COLORS.green),
        s("tokens_per_forward", "tokens per forward pass", COLORS.blue),
        s("tail_phase_seconds", "tail phase s (last 10% of samples)", COLORS.orange, "right"),
      ],
      rewardErrors: [s("reward_errors", "reward errors", COLORS.red)],
      // on-policy distillation (algorithm distill): the student's reverse KL to its teacher on its sampled tokens and,
      // with algorithm.teacher_topk, the KL from the teacher over its top-k tokens, beside the held-out reward
      distill: [
        s("reverse_kl", "reverse KL to the teacher", COLORS.purple),
        s("topk_kl", "teacher top-k KL", COLORS.orange),
        s("eval_reward", "held-out reward", COLORS.green, "right"),
      ],
      instances: [s("instances", "producing instances", COLORS.blue), s("instances_live", "live instance rows", COLORS.grey)],
      turns: [
        s("turns_mean", "turns mean", COLORS.purple),
        s("turns_p90", "turns p90", COLORS.orange),
        s("turns_max", "turns max", COLORS.red),
        s("len_p99", "p99 tokens", COLORS.grey, "right"),
      ],
    };
  }, [live.iterations, view.x]);

  const markers = useMemo(() => {
    const xs = xByIteration(live.iterations, view.x);
    return scaleMarkers(live.events, live.iterations).flatMap((m) => {
      const x = iterationToX(xs, m.x);
      return x === null ? [] : [{ ...m, x }];
    });
  }, [live.events, live.iterations, view.x]);
  const [timelineScope, setTimelineScope] = useState<"recent" | "all">("recent");
  // Long-tail view: every sample's recorded length (iteration records), not only the stored samples (the first to
  // finish, so the shortest); "stored" draws just those.
  const [lengthScope, setLengthScope] = useState<"latest" | "recent" | "stored">("latest");
  const latestLengths = useMemo(() => recentIterationLengths(live.iterations, live.samples, 1), [live.iterations, live.samples]);
  const recentLengths = useMemo(() => recentIterationLengths(live.iterations, live.samples, 10), [live.iterations, live.samples]);
  const lengths = useMemo(
    () => (lengthScope === "stored" ? live.samples.map((s) => s.length) : lengthScope === "recent" ? recentLengths.lengths : latestLengths.lengths),
    [live.samples, lengthScope, latestLengths, recentLengths],
  );
  const truncatedFlags = useMemo(
    () => (lengthScope === "stored" ? live.samples.map((s) => Boolean(s.truncated)) : lengthScope === "recent" ? recentLengths.truncated : latestLengths.truncated),
    [live.samples, lengthScope, latestLengths, recentLengths],
  );
  const turns = useMemo(
    () => (lengthScope === "stored" ? sampleTurns(live.samples) : latestIterationTurns(live.iterations, live.samples)),
    [live.samples, live.iterations, lengthScope],
  );
  const job = live.job;
  if (!job) {
    if (live.error instanceof ApiError && live.error.status === 404) {
      return (
        <div className="not-found" data-testid="job-not-found">
          <h2>Job #{jobId} not found</h2>
          <p className="muted">It does not exist or belongs to another team.</p>
          <Link className="button" to="/jobs">← Back to runs</Link>
        </div>
      );
    }
    return live.error ? (
      <div><ErrorBanner error={live.error} /><Link to="/jobs">← Back to runs</Link></div>
    ) : <div className="splash">Loading job…</div>;
  }
  const latest = (job.latest_metrics ?? {}) as Record<string, unknown>;
  const spec = jobSpec(job);
  const alpha = spec.dispatch?.alpha ?? 0.2;
  const episodic = Boolean(spec.environment) || turns.turns.length > 0 || typeof latest.turns_mean === "number";
  const speculated = series.speculation.some((line) => line.points.length > 0);
  const distilled = series.distill[0].points.length > 0;
  const dot = liveIndicator(job.status, live.connected);
  const chart = { syncKey: `job-${job.id}-${view.x}`, view, xLabel: X_LABELS[view.x], integerX: view.x === "iteration" };
  const samplesRate = currentRate(job.status, health, latest.samples_per_s);
  const tokensRate = currentRate(job.status, health, latest.tokens_per_s);

  const act = async (action: Action) => {
    if (action === "cancel" && !window.confirm(`Cancel job "${job.name}" (#${job.id})? It cannot be resumed.`)) return;
    setActionError(null);
    try {
      const path = { params: { path: { job_id: job.id } } };
      const fresh =
        action === "pause"
          ? await unwrap(api.POST("/api/v1/jobs/{job_id}/pause", path))
          : action === "resume"
            ? await unwrap(api.POST("/api/v1/jobs/{job_id}/resume", path))
            : await unwrap(api.POST("/api/v1/jobs/{job_id}/cancel", path));
      live.setJob(fresh);
    } catch (err) {
      setActionError(err);
    }
  };

  return (
    <div className="job-detail">
      <div className="page-head">
        <div>
          <Link to="/jobs" className="muted">← Jobs</Link>
          <h2>
            {job.name} <span className="muted">#{job.id}</span> <StatusBadge status={job.status} />
            {health ? <HealthBadge health={health} status={job.status} /> : null}
            <span className={`live-dot ${dot.tone}`} title={dot.title} data-testid="live-dot" data-tone={dot.tone} />
          </h2>
          <div className="muted">
            {spec.model} · {spec.algorithm?.name} · {spec.mode} mode · dispatch {spec.dispatch?.policy} · priority {spec.priority ?? "normal"}
            {spec.preemptible === false ? " (not preemptible)" : ""} · created {formatTime(job.created_at)}
          </div>
        </div>
        <div className="actions">
          <Progress value={job.progress?.iteration ?? 0} total={job.progress?.total_iterations ?? 0} />
          {canWrite
            ? (Object.keys(ACTIONS) as Action[]).map((action) => (
                <button key={action} className={action === "cancel" ? "danger" : ""} disabled={!ACTIONS[action].includes(job.status)} onClick={() => void act(action)}>
                  {action[0].toUpperCase() + action.slice(1)}
                </button>
              ))
            : null}
          {canWrite ? <button onClick={() => navigate(`/submit?from=${job.id}`)}>Clone</button> : null}
          {canWrite ? <button onClick={() => navigate(playgroundRoute(`job:${job.id}@last`))} title="chat with the newest checkpoint in the playground">Chat</button> : null}
          <button onClick={() => setShowYaml((v) => !v)} aria-pressed={showYaml}>YAML</button>
        </div>
      </div>
      <ErrorBanner error={actionError} />
      {job.error && health?.state !== "failed" ? <div className="banner banner-error">Job failed: {job.error}</div> : null}
      {health ? <HealthBanner health={health} /> : null}
      {job.status === "queued" && job.queue ? (
        <div className="banner banner-info" data-testid="job-queue">
          Waiting in the queue: position {job.queue.position} · waiting for {job.queue.waiting_for}
          {job.queue.eta_s !== null && job.queue.eta_s !== undefined ? ` · starts in about ${formatDuration(job.queue.eta_s)}` : ""}
          {" · "}{job.queue.reason}
        </div>
      ) : null}
      <ExportMenu jobId={job.id} />
      {showYaml ? <Card title="Spec (YAML)" className="yaml-card"><SpecYaml jobId={job.id} /></Card> : null}
      <JobNotes job={job} canWrite={canWrite} onChange={live.setJob} />

      <div className="kpis" data-testid="kpis">
        <Kpi label="samples/s" value={formatNumber(samplesRate.value, 1)} note={samplesRate.note} />
        <Kpi label="tokens/s" value={formatNumber(tokensRate.value, 0)} note={tokensRate.note} />
        <Kpi label="reward" value={formatNumber(latest.reward_mean, 3)} />
        <Kpi label="KL" value={formatNumber(latest.kl, 4)} />
        <Kpi label="p99/p50 skew" value={formatNumber(latest.skew_p99_p50, 2)} />
        <Kpi label="staleness" value={formatNumber(latest.staleness_mean, 2)} />
        <Kpi
          label="instances"
          value={health ? `${health.instances.running} / ${health.instances.target}` : `${job.running_instances ?? 0} / ${job.target_instances ?? 0}`}
          note={health
            ? [health.instances.pending ? `${health.instances.pending} pending` : "", health.instances.silent ? `${health.instances.silent} silent` : ""].filter(Boolean).join(", ") || undefined
            : job.pending_instances ? `${job.pending_instances} pending` : undefined}
          badge={job.shared_generation ? <SharedBadge /> : undefined}
        />
        <Kpi label="iteration" value={`${job.progress?.iteration ?? 0}`}
          badge={job.shared_training ? <SharedTrainingBadge /> : undefined} />
      </div>

      <ChartControls view={view} onChange={setView} />
      <div className="grid">
        <JobEta jobId={job.id} iteration={job.progress?.iteration ?? 0} status={job.status} />
        <Card title="Throughput"><LineChart {...chart} series={series.throughput} markers={markers} /></Card>
        <Card title="Reward and KL"><LineChart {...chart} series={series.reward} markers={markers} minSpan={REWARD_MIN_SPAN} /></Card>
        <Card title="Training signals">{health ? <SignalList signals={health.signals} iterations={live.iterations.length} /> : <p className="muted">loading…</p>}</Card>
        <Card title={`Reward errors${health?.reward_errors_total ? ` (${health.reward_errors_total} in all)` : ""}`}>
          <div data-testid="reward-errors-chart"><LineChart {...chart} series={series.rewardErrors} /></div>
        </Card>
        <Card title="Instances over iterations"><LineChart {...chart} series={series.instances} markers={markers} /></Card>
        <Card
          title="Response lengths (long tail)"
          actions={
            <select aria-label="length scope" value={lengthScope} onChange={(e) => setLengthScope(e.target.value as "latest" | "recent" | "stored")}>
              <option value="latest">latest iteration{latestLengths.iteration !== null ? ` (${latestLengths.lengths.length} ${latestLengths.source === "metrics" ? "recorded" : "stored samples"})` : ""}</option>
              <option value="recent">last 10 iterations{recentLengths.iteration !== null ? ` (${recentLengths.lengths.length} ${recentLengths.source === "metrics" ? "recorded" : "stored samples"})` : ""}</option>
              <option value="stored">stored samples only ({live.samples.length}, the first to finish)</option>
            </select>
          }
        >
          {spec.environment
            ? <LengthHistogram lengths={lengths} alpha={alpha} maxTokens={spec.environment.max_episode_tokens} truncatedFlags={truncatedFlags} episodes turnsTruncated={typeof latest.turns_truncated_fraction === "number" ? latest.turns_truncated_fraction : null} />
            : <LengthHistogram lengths={lengths} alpha={alpha} maxTokens={spec.generation?.max_tokens} truncatedFlags={truncatedFlags} />}
        </Card>
        {episodic ? <Card title="Turns per episode (beside tokens)"><TurnsHistogram turns={turns.turns} lengths={turns.lengths} /></Card> : null}
        <Card title="Skew over iterations"><LineChart {...chart} series={series.skew} /></Card>
        {episodic ? <Card title="Turns over iterations"><div data-testid="turns-chart"><LineChart {...chart} series={series.turns} /></div></Card> : null}
        {distilled ? <Card title="Distillation"><div data-testid="distill-chart"><LineChart {...chart} series={series.distill} markers={markers} /></div></Card> : null}
        {speculated ? <Card title="Speculative decoding"><div data-testid="speculation-chart"><LineChart {...chart} series={series.speculation} markers={markers} /></div></Card> : null}
        <MetricPanels rows={live.iterations} x={view.x} chart={{ ...chart, markers }} />
        <Card title="Pipeline timeline" className="wide" actions={
          <select aria-label="timeline scope" value={timelineScope} onChange={(e) => setTimelineScope(e.target.value as "recent" | "all")}>
            <option value="recent">last 2 minutes (live)</option>
            <option value="all">whole job</option>
          </select>
        }>
          {timelineScope === "recent"
            ? <PipelineTimeline spans={live.spans} now={now} />
            : <WholeJobTimeline jobId={job.id} live={!["succeeded", "failed", "cancelled"].includes(job.status)} />}
        </Card>
        <Card title="Iteration time breakdown"><LineChart {...chart} series={series.time} markers={markers} /></Card>
        <Card title="Staleness"><LineChart {...chart} series={series.staleness} markers={markers} /></Card>
        {series.mismatch[0].points.length > 0 ? <Card title="Training-inference mismatch"><div data-testid="mismatch-chart"><LineChart {...chart} series={series.mismatch} markers={markers} /></div></Card> : null}
        <ScalingPanel job={job} events={live.events} canWrite={canWrite} onChange={live.setJob} health={health} />
        <JobLimits job={job} events={live.events} canWrite={canWrite} onChange={live.setJob} />
        <Card title="Events" className="events-card"><EventsLog events={live.events} /></Card>
        <Card title="Checkpoints" className="wide"><Checkpoints jobId={job.id} iteration={job.progress?.iteration ?? 0} status={job.status}
          lora={Boolean(spec.training?.lora)} /></Card>
        <Card title="Samples" className="wide"><SampleBrowser samples={live.samples} jobId={job.id} /></Card>
      </div>
    </div>
  );
}

function Kpi({ label, value, note, badge }: { label: string; value: string; note?: string; badge?: ReactNode }) {
  return (
    <div className="kpi" data-testid={`kpi-${label}`}>
      <span className="kpi-value">{value}</span>
      <span className="kpi-label">{label}{note ? <b className="kpi-note"> · {note}</b> : null}</span>
      {badge}
    </div>
  );
}
