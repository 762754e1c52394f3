/**
 * A job's tags and notes on its page: members add tags (several at once, "a, b c"), remove one with its ✕ and edit
 * the notes (saved with the button); viewers read them. Each change is one `PATCH /jobs/{id}`; the answer is the job.
 */
import { useEffect, useState } from "react";
import { api, unwrap } from "../api/client";
import type { Job } from "../api/types";
import { Card, ErrorBanner } from "../components/ui";
import { MAX_TAGS, parseTags } from "../lib/runs";

type Change = { add_tags?: string[]; remove_tags?: string[]; notes?: string };

export function JobNotes({ job, canWrite, onChange }: { job: Job; canWrite: boolean; onChange: (job: Job) => void }) {
  const [draft, setDraft] = useState(job.notes);
  const [tagText, setTagText] = useState("");
  const [problem, setProblem] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [saved, setSaved] = useState(false);
  useEffect(() => setDraft(job.notes), [job.id, job.notes]);

  const save = async (change: Change) => {
    setError(null);
    setSaved(false);
    try {
      onChange(await unwrap(api.PATCH("/api/v1/jobs/{job_id}", { params: { path: { job_id: job.id } }, body: change })));
      return true;
    } catch (err) {
      setError(err);
      return false;
    }
  };
  const addTags = async () => {
    const { tags, bad } = parseTags(tagText);
    if (bad.length) return setProblem(`not a tag: ${bad.join(", ")} (letters, digits and _ . : = + -, at most 40)`);
    if (new Set([...job.tags, ...tags]).size > MAX_TAGS) return setProblem(`a job has at most ${MAX_TAGS} tags`);
    setProblem(null);
    if (tags.length && (await save({ add_tags: tags }))) setTagText("");
  };
  const saveNotes = async () => {
    if (await save({ notes: draft })) setSaved(true);
  };

  return (
    <Card title="Tags and notes" className="wide job-notes">
      <div data-testid="job-notes">
        <div className="tags" data-testid="job-tags">
          {job.tags.map((tag) => (
            <span key={tag} className="tag">
              <span className="tag-name">{tag}</span>
              {canWrite ? <button type="button" className="tag-remove" aria-label={`remove tag ${tag}`} onClick={() => void save({ remove_tags: [tag] })}>✕</button> : null}
            </span>
          ))}
          {job.tags.length === 0 ? <span className="muted">no tags</span> : null}
        </div>
        {canWrite ? (
          <>
            <form className="row" onSubmit={(e) => { e.preventDefault(); void addTags(); }}>
              <input aria-label="new tags" placeholder="add tags: sweep, lr:1e-4" value={tagText} onChange={(e) => setTagText(e.target.value)} />
              <button type="submit" disabled={!tagText.trim()}>Add tags</button>
              {problem ? <span className="field-error">{problem}</span> : null}
            </form>
            <textarea aria-label="notes" placeholder="notes: what this run tries, what happened" value={draft} maxLength={10_000}
              onChange={(e) => { setDraft(e.target.value); setSaved(false); }} />
            <div className="row">
              <button type="button" onClick={() => void saveNotes()} disabled={draft === job.notes}>Save notes</button>
              {saved && draft === job.notes ? <span className="muted" data-testid="notes-saved">saved</span> : null}
            </div>
          </>
        ) : job.notes ? <p className="notes-text" data-testid="notes-text">{job.notes}</p> : <p className="muted">no notes</p>}
        <ErrorBanner error={error} />
      </div>
    </Card>
  );
}
