/**
 * A multi-turn episode of the sample browser: the conversation (the opening, the policy's turns with their tool
 * calls, the tool results and the environment's replies) and the response's tokens cut into what the policy
 * generated (trained) and what the environment added (context, never trained).
 */
import { formatNumber } from "../components/ui";
import { policyShare, toolResultName, type Episode, type EpisodeMessage } from "../lib/episode";

export function EpisodeView({ episode }: { episode: Episode }) {
  const share = policyShare(episode);
  return (
    <div className="episode" data-testid="episode">
      <div className="stat-row" data-testid="episode-stats">
        <span><b>{episode.turns}</b> policy turn{episode.turns === 1 ? "" : "s"}</span>
        <span>ended: <b>{episode.end ?? "?"}</b></span>
        <span>policy tokens <b>{episode.trainedTokens}</b> (trained)</span>
        <span>environment tokens <b>{episode.contextTokens}</b> (context)</span>
        {share !== null ? <span>policy share <b>{(share * 100).toFixed(0)}%</b></span> : null}
      </div>
      <ol className="conversation" data-testid="conversation">
        {episode.messages.map((message, index) => (
          <Turn key={index} message={message} toolName={message.role === "tool" ? toolResultName(episode.messages, index) : null} />
        ))}
      </ol>
      {episode.segments.length ? <Segments episode={episode} /> : null}
    </div>
  );
}

function roleLabel(message: EpisodeMessage, toolName: string | null): string {
  if (message.policyTurn !== null) return `policy · turn ${message.policyTurn}`;
  if (message.role === "tool") return `tool result${toolName ? ` · ${toolName}` : ""}`;
  return message.role;
}

function Turn({ message, toolName }: { message: EpisodeMessage; toolName: string | null }) {
  const kind = message.policyTurn !== null ? "policy" : message.role;
  return (
    <li className={`turn turn-${kind}`} data-testid={`turn-${kind}`}>
      <div className="turn-head">
        <b>{roleLabel(message, toolName)}</b>
        {message.stepReward !== null ? <span className="muted">step reward {formatNumber(message.stepReward, 3)}</span> : null}
      </div>
      {message.content ? <pre className="mono turn-text">{message.content}</pre> : null}
      {message.toolCalls.map((call) => (
        <div key={call.id} className="tool-call" data-testid="tool-call">
          <span className="muted">calls</span> <code>{call.name}({call.arguments})</code>
        </div>
      ))}
      {message.toolCallErrors.map((err, i) => <div key={i} className="bad">malformed tool call: {err}</div>)}
    </li>
  );
}

/** The response as the trainer saw it: policy tokens (trained) and environment / tool tokens (context) apart. */
function Segments({ episode }: { episode: Episode }) {
  return (
    <div className="segments" data-testid="segments">
      <div className="muted">Tokens after the opening: <span className="seg-trained">policy (trained)</span>{" "}
        <span className="seg-context">environment / tools (context)</span></div>
      <pre className="mono segment-text">
        {episode.segments.map((segment) => (
          <span key={segment.start} className={segment.trained ? "seg-trained" : "seg-context"} data-trained={segment.trained}
            title={`tokens ${segment.start}–${segment.end} · ${segment.trained ? "policy (trained)" : "environment (context)"}`}>
            {segment.text}
          </span>
        ))}
      </pre>
    </div>
  );
}
