/**
 * Playground: chat with any model the team can use through the platform's OpenAI-compatible `/openai/v1` (registered
 * models, fine-tuned `ft:` ids, `job:<id>@best|@last|@<iteration>` checkpoint aliases, `tinker://` sampler paths),
 * optionally side by side with a second one on the same conversation. Sampling controls (temperature, top_p,
 * max_tokens, seed), each reply's token counts, finish reason and time, and its tokens shaded by probability (hover:
 * logprob and the top alternatives). `#/playground?model=job:12@last&compare=base` opens with models chosen.
 */
import { useQuery } from "@tanstack/react-query";
import { useState } from "react";
import { useSearchParams } from "react-router";
import { authHeaders } from "../api/client";
import { Card, ErrorBanner } from "../components/ui";
import { chatBody, clampSampling, DEFAULT_SAMPLING, errorText, meanLogprob, percent, readReply, type ChatMessage, type Reply, type Sampling, type TokenLogprob } from "../lib/playground";

interface Answer {
  pending: boolean;
  reply?: Reply;
  error?: string;
  seconds?: number;
}
interface Turn {
  user: string;
  answers: Answer[]; // one per column
}

async function openai<T>(path: string, init?: RequestInit): Promise<T> {
  const response = await fetch(`/openai/v1${path}`, { ...init, headers: { ...authHeaders(), "Content-Type": "application/json" } });
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new Error(errorText(response.status, body));
  return body as T;
}

export function PlaygroundPage() {
  const [params] = useSearchParams();
  const models = useQuery({ queryKey: ["openai-models"], queryFn: () => openai<{ data: { id: string }[] }>("/models") });
  const [chosen, setChosen] = useState<string[]>(() => [params.get("model") ?? "", params.get("compare") ?? ""]);
  const [sideBySide, setSideBySide] = useState(Boolean(params.get("compare")));
  const [sampling, setSampling] = useState<Sampling>(DEFAULT_SAMPLING);
  const [system, setSystem] = useState("");
  const [turns, setTurns] = useState<Turn[]>([]);
  const [draft, setDraft] = useState("");
  const columns = sideBySide ? 2 : 1;
  const busy = turns.some((t) => t.answers.some((a) => a.pending));
  const ids = (models.data?.data ?? []).map((m) => m.id);
  const setSample = (key: keyof Sampling, text: string) =>
    setSampling((s) => ({ ...s, [key]: key === "seed" && text.trim() === "" ? null : Number(text) }));

  const history = (column: number): ChatMessage[] =>
    turns.flatMap((t) => {
      const reply = t.answers[column]?.reply;
      return reply ? [{ role: "user" as const, content: t.user }, { role: "assistant" as const, content: reply.text }] : [];
    });

  const send = () => {
    const text = draft.trim();
    if (!text || busy || chosen.slice(0, columns).some((m) => !m.trim())) return;
    const index = turns.length;
    const settled = clampSampling(sampling);
    const set = (column: number, answer: Answer) =>
      setTurns((all) => all.map((t, i) => (i === index ? { ...t, answers: t.answers.map((a, k) => (k === column ? answer : a)) } : t)));
    const conversations = Array.from({ length: columns }, (_, k) => [...history(k), { role: "user" as const, content: text }]);
    setTurns((all) => [...all, { user: text, answers: conversations.map(() => ({ pending: true })) }]);
    setDraft("");
    conversations.forEach((messages, column) => {
      const started = performance.now();
      const body = JSON.stringify(chatBody(chosen[column].trim(), system, messages, settled));
      openai<unknown>("/chat/completions", { method: "POST", body })
        .then((answer) => set(column, { pending: false, reply: readReply(answer), seconds: (performance.now() - started) / 1000 }))
        .catch((err: unknown) => set(column, { pending: false, error: err instanceof Error ? err.message : String(err) }));
    });
  };

  return (
    <div className="playground" data-testid="playground">
      <div className="page-head"><h2>Playground</h2></div>
      <ErrorBanner error={models.error} />
      <Card title="Models and sampling">
        <datalist id="playground-models">{ids.map((id) => <option key={id} value={id} />)}</datalist>
        <div className="filters">
          {Array.from({ length: columns }, (_, k) => (
            <label key={k} className="toggle">
              {k === 0 ? "model" : "compare with"}
              <input list="playground-models" aria-label={k === 0 ? "model" : "second model"} size={34} value={chosen[k]}
                placeholder="job:12@best, ft:…, a model name, tinker://…"
                onChange={(e) => setChosen((c) => c.map((m, i) => (i === k ? e.target.value : m)))} />
            </label>
          ))}
          <label className="toggle"><input type="checkbox" aria-label="side by side" checked={sideBySide} onChange={(e) => setSideBySide(e.target.checked)} /> side by side</label>
        </div>
        <div className="filters sampling">
          <label className="toggle">temperature <input type="number" aria-label="temperature" min={0} max={2} step={0.1} value={sampling.temperature} onChange={(e) => setSample("temperature", e.target.value)} /></label>
          <label className="toggle">top_p <input type="number" aria-label="top_p" min={0.01} max={1} step={0.05} value={sampling.top_p} onChange={(e) => setSample("top_p", e.target.value)} /></label>
          <label className="toggle">max_tokens <input type="number" aria-label="max_tokens" min={1} max={16384} value={sampling.max_tokens} onChange={(e) => setSample("max_tokens", e.target.value)} /></label>
          <label className="toggle">seed <input type="number" aria-label="seed" min={0} placeholder="none" value={sampling.seed ?? ""} onChange={(e) => setSample("seed", e.target.value)} /></label>
          <label className="toggle">alternatives <input type="number" aria-label="top_logprobs" min={0} max={20} value={sampling.top_logprobs} onChange={(e) => setSample("top_logprobs", e.target.value)} /></label>
        </div>
        <textarea aria-label="system prompt" rows={2} placeholder="system prompt (optional)" value={system} onChange={(e) => setSystem(e.target.value)} />
        <p className="muted">{ids.length} models and checkpoints of the team are listed; any id the OpenAI API accepts can be typed. Same as <code>POST /openai/v1/chat/completions</code> with the openai client.</p>
      </Card>
      <div className={`playground-columns cols-${columns}`}>
        {Array.from({ length: columns }, (_, column) => (
          <section key={column} className="card playground-column" data-testid={`column-${column}`}>
            <header className="card-head"><h3>{chosen[column] || "choose a model"}</h3></header>
            <div className="card-body">
              {turns.length === 0 ? <p className="muted">No messages yet.</p> : null}
              {turns.map((turn, i) => (
                <div key={i} className="chat-turn">
                  <div className="chat-user"><b>user</b> {turn.user}</div>
                  <AnswerView answer={turn.answers[column]} testId={`reply-${column}-${i}`} />
                </div>
              ))}
            </div>
          </section>
        ))}
      </div>
      <div className="composer">
        <textarea aria-label="message" rows={3} value={draft} placeholder="Message (Ctrl+Enter sends)" onChange={(e) => setDraft(e.target.value)}
          onKeyDown={(e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) send(); }} />
        <div className="actions">
          <button className="primary" disabled={busy || !draft.trim() || chosen.slice(0, columns).some((m) => !m.trim())} onClick={send}>{busy ? "Generating…" : "Send"}</button>
          <button disabled={busy || turns.length === 0} onClick={() => setTurns([])}>Clear</button>
        </div>
      </div>
    </div>
  );
}

function AnswerView({ answer, testId }: { answer: Answer | undefined; testId: string }) {
  if (!answer) return null;
  if (answer.pending) return <div className="chat-assistant muted" data-testid={testId}>generating…</div>;
  if (answer.error) return <div className="banner banner-error" role="alert" data-testid={testId}>{answer.error}</div>;
  const reply = answer.reply as Reply;
  const mean = meanLogprob(reply.tokens);
  return (
    <div className="chat-assistant" data-testid={testId}>
      <div className="chat-text" data-testid="reply-text">{reply.text}</div>
      {reply.tokens.length ? (
        <div className="chat-tokens" data-testid="reply-tokens" aria-label="tokens by probability">
          {reply.tokens.map((t, i) => <Token key={i} token={t} />)}
        </div>
      ) : null}
      <div className="muted chat-stats" data-testid="reply-stats">
        {reply.promptTokens} prompt + {reply.completionTokens} completion tokens · finish {reply.finishReason}
        {answer.seconds !== undefined ? ` · ${answer.seconds.toFixed(2)} s` : ""}
        {mean !== null ? ` · mean logprob ${mean.toFixed(3)}` : ""}
      </div>
    </div>
  );
}

/** A token shaded by how unlikely it was (white: certain, orange: improbable); hover lists the alternatives. */
function Token({ token }: { token: TokenLogprob }) {
  const p = percent(token.logprob);
  const title = [`${JSON.stringify(token.token)}: p ${p}% (logprob ${token.logprob.toFixed(3)})`,
    ...token.top.map((alt) => `  ${JSON.stringify(alt.token)} ${percent(alt.logprob)}%`)].join("\n");
  return (
    <span className="tok" title={title} data-logprob={token.logprob.toFixed(4)} style={{ background: `rgba(234, 88, 12, ${((100 - p) / 100) * 0.45})` }}>
      {token.token}
    </span>
  );
}
