/** Small presentational pieces shared by the pages. */
import type { ReactNode } from "react";

export function StatusBadge({ status }: { status: string }) {
  return <span className={`badge badge-${status}`} data-testid="status">{status}</span>;
}

export function Card({ title, actions, children, className = "" }: { title: ReactNode; actions?: ReactNode; children: ReactNode; className?: string }) {
  return (
    <section className={`card ${className}`}>
      <header className="card-head">
        <h3>{title}</h3>
        {actions ? <div className="card-actions">{actions}</div> : null}
      </header>
      <div className="card-body">{children}</div>
    </section>
  );
}

/** A labelled form control with its validation message (from a 422 `loc`) right under it. */
export function Field({ label, error, hint, children }: { label: string; error?: string; hint?: ReactNode; children: ReactNode }) {
  return (
    <label className={`field ${error ? "field-invalid" : ""}`}>
      <span className="field-label">{label}</span>
      {children}
      {error ? <span className="field-error" role="alert">{error}</span> : hint ? <span className="field-hint">{hint}</span> : null}
    </label>
  );
}

export function ErrorBanner({ error }: { error: unknown }) {
  if (!error) return null;
  const message = error instanceof Error ? error.message : String(error);
  return <div className="banner banner-error" role="alert">{message}</div>;
}

export function Progress({ value, total }: { value: number; total: number }) {
  const share = total > 0 ? Math.min(1, value / total) : 0;
  return (
    <div className="progress" title={`${value} / ${total}`}>
      <div className="progress-bar" style={{ width: `${share * 100}%` }} />
      <span>{value} / {total}</span>
    </div>
  );
}

export function formatNumber(value: unknown, digits = 2): string {
  if (typeof value !== "number" || !Number.isFinite(value)) return "–";
  if (Math.abs(value) >= 1000) return value.toFixed(0);
  return value.toFixed(digits);
}

export function formatTime(value: string | null | undefined): string {
  if (!value) return "–";
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? value : date.toLocaleString();
}

/** A job whose generation runs on shared instances (`shared_generation`: LoRA jobs on one base model, one process). */
export function SharedBadge({ short = false }: { short?: boolean }) {
  return (
    <span className="pill shared-pill" data-testid="shared-badge"
      title="generation runs on instances shared with other LoRA jobs on the same base model">
      {short ? "shared" : "shared instances"}
    </span>
  );
}

/** A job whose driver runs in a shared training process (`shared_training`: LoRA jobs on one base model train in one
 * process and one training slot, each with its own adapter, optimizer and checkpoints). */
export function SharedTrainingBadge({ short = false }: { short?: boolean }) {
  return (
    <span className="pill shared-pill" data-testid="shared-training-badge"
      title="training runs in a process shared with other LoRA jobs on the same base model (one training slot; each job has its own adapter, optimizer and checkpoints)">
      {short ? "shared trainer" : "shared training"}
    </span>
  );
}
