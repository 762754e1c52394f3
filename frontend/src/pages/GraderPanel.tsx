/**
 * Grader test bench (`#/graders`, as OpenAI's graders/run): paste a grader spec (the platform's reward spec, a job
 * spec, or an OpenAI grader object; JSON or YAML), a sample output and its item, and see the score, each sub-grader's
 * score, pass/fail and any error before submitting a job. `#/graders?spec=...` arrives pre-filled from the submit form.
 */
import { useState, type FormEvent } from "react";
import { useSearchParams } from "react-router";
import { api, ApiError, unwrap } from "../api/client";
import { Card, ErrorBanner, Field, formatNumber } from "../components/ui";
import { REWARD_TYPES } from "../lib/choices";
import { GraderInputError, graderRequest, specFromRoute, type GraderRunResult } from "../lib/graderSpec";

/** The types the bench can run: the schema's reward types and graders, new ones included, less python (sandbox only). */
const TYPES_HINT = `types: ${REWARD_TYPES.filter(([value]) => value !== "python").map(([value]) => value).join(", ")}`;

const EXAMPLE_SPEC = `type: string_check
input: "{{ sample.output_text }}"
reference: "{{ item.answer }}"
operation: eq
`;

export function GraderPanelPage() {
  const [params] = useSearchParams();
  const [spec, setSpec] = useState(() => specFromRoute(params.get("spec")) || EXAMPLE_SPEC);
  const [output, setOutput] = useState("42");
  const [item, setItem] = useState('{"answer": "42"}');
  const [prompt, setPrompt] = useState("");
  const [result, setResult] = useState<GraderRunResult | null>(null);
  const [fields, setFields] = useState<Record<string, string>>({});
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  const run = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setResult(null);
    setFields({});
    setError(null);
    try {
      const body = await graderRequest({ spec, output, item, prompt });
      setResult(await unwrap(api.POST("/api/v1/graders/run", { body })));
    } catch (caught) {
      if (caught instanceof GraderInputError) setFields({ [caught.field]: caught.message });
      else if (caught instanceof ApiError && Object.keys(caught.fields).length > 0) setFields(caught.fields);
      else setError(caught);
    } finally {
      setBusy(false);
    }
  };

  return (
    <div data-testid="grader-panel">
      <div className="page-head">
        <h2>Test a grader</h2>
      </div>
      <p className="muted">
        A reward spec (<code>type</code>, <code>params</code>), a job spec (its <code>reward</code>) or an OpenAI grader
        object, in JSON or YAML. Templates read <code>{"{{ sample.output_text }}"}</code> and <code>{"{{ item.KEY }}"}</code>.
      </p>
      <ErrorBanner error={error} />
      <form className="grader-grid" onSubmit={run} noValidate>
        <Card title="Grader spec">
          <Field label="Spec (JSON or YAML)" error={specError(fields)} hint={TYPES_HINT}>
            <textarea name="grader_spec" className="mono" rows={14} value={spec} onChange={(e) => setSpec(e.target.value)} spellCheck={false} />
          </Field>
        </Card>
        <Card title="Sample">
          <Field label="Output text (the model's response)" error={fields["sample.output_text"] ?? fields.sample}>
            <textarea name="grader_output" className="mono" rows={4} value={output} onChange={(e) => setOutput(e.target.value)} />
          </Field>
          <Field label="Item (the dataset row, JSON or YAML)" error={fields.item}>
            <textarea name="grader_item" className="mono" rows={4} value={item} onChange={(e) => setItem(e.target.value)} spellCheck={false} />
          </Field>
          <Field label="Prompt (for rewards that read it)" error={fields.prompt}>
            <input name="grader_prompt" value={prompt} onChange={(e) => setPrompt(e.target.value)} />
          </Field>
          <button type="submit" className="primary" disabled={busy}>{busy ? "Running…" : "Run grader"}</button>
        </Card>
      </form>
      {result ? <GraderResult result={result} /> : null}
    </div>
  );
}

/** Every 422 message about the spec (`grader`, `grader.params`, ...), each with the field it names. */
function specError(fields: Record<string, string>): string | undefined {
  const mine = Object.entries(fields).filter(([key]) => key === "grader" || key.startsWith("grader.") || key === "");
  return mine.length ? mine.map(([key, msg]) => (key && key !== "grader" ? `${key}: ${msg}` : msg)).join("; ") : undefined;
}

function GraderResult({ result }: { result: GraderRunResult }) {
  const subs = Object.entries(result.sub_rewards);
  return (
    <Card title="Result">
      <div className="stat-row" data-testid="grader-result">
        <span>score <b data-testid="grader-score">{formatNumber(result.reward, 4)}</b></span>
        {result.passed !== null ? <span className={result.passed ? "good" : "bad"}>{result.passed ? "passed" : "did not pass"}</span> : null}
      </div>
      {result.error ? <p className="error" role="alert" data-testid="grader-error">could not grade this sample: {result.error}</p> : null}
      {subs.length ? (
        <table className="table compact" data-testid="grader-subscores">
          <thead><tr><th>Sub-grader</th><th>Score</th></tr></thead>
          <tbody>
            {subs.map(([name, value]) => <tr key={name}><td>{name}</td><td>{formatNumber(value, 4)}</td></tr>)}
          </tbody>
        </table>
      ) : null}
    </Card>
  );
}
