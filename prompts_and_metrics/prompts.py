"""Reader prompts (DESIGN §9.4 BabiLong/NIAH, §9.5 open QA). Wording and examples are this
project's own; only the structure and the answer formats follow the spec."""

from __future__ import annotations

from dataclasses import dataclass

from prompts_and_metrics.metrics import task_key

SYSTEM_BABILONG = "You are an AI assistant, and your job is to answer the user's questions."


@dataclass(frozen=True)
class TaskPrompt:
    instruction: str
    examples: tuple[str, ...]
    post_prompt: str

    def examples_block(self) -> str:
        return "\n".join(f"Example:\n{e}" for e in self.examples)


def _ex(story: str, question: str, answer: str) -> str:
    return f"{story}\nQuestion: {question}\nAnswer: {answer}"


_YESNO = "Reply with one word only: yes or no."
_ONE_LOC = "Reply with a single word: the location. Do not explain."

TASK_PROMPTS: dict[str, TaskPrompt] = {
    "qa1": TaskPrompt(
        "The context below mentions people going from one place to another. A question asks where "
        "someone is. Use the last place the text says that person went.",
        (
            _ex(
                "Bill went to the office. Julie went back to the bedroom. Bill journeyed to the kitchen.",
                "Where is Julie?",
                "The most recent location of Julie is bedroom.",
            ),
            _ex(
                "Sandra travelled to the garden. Sandra moved to the hallway.",
                "Where is Sandra?",
                "The most recent location of Sandra is hallway.",
            ),
        ),
        "Answer in the form: The most recent location of 'person' is 'location'. "
        "Give only this sentence, with no explanation.",
    ),
    "qa2": TaskPrompt(
        "The context below describes people moving around and picking up or putting down things. "
        "A thing a person holds travels with that person; a thing that was put down stays where it "
        "was left. A question asks where an object is.",
        (
            _ex("Fred took the apple. Fred went to the office.", "Where is the apple?", "The apple is in office."),
            _ex(
                "Mary grabbed the milk. Mary went to the garden. Mary left the milk. Mary went to the bathroom.",
                "Where is the milk?",
                "The milk is in garden.",
            ),
        ),
        "Answer in the form: The 'item' is in 'location'. Give only this sentence, with no explanation.",
    ),
    "qa3": TaskPrompt(
        "The context below describes people moving around and picking up or putting down things. "
        "Objects held by someone move with them; objects put down stay. A question asks where an "
        "object was just before it arrived at a given place.",
        (
            _ex(
                "John picked up the football. John went to the bedroom. John went to the kitchen.",
                "Where was the football before the kitchen?",
                "Before the kitchen the football was in the bedroom.",
            ),
            _ex(
                "Daniel went to the garden. Daniel got the apple. Daniel moved to the hallway. "
                "Daniel travelled to the office.",
                "Where was the apple before the office?",
                "Before the office the apple was in the hallway.",
            ),
        ),
        "Answer in the form: Before the $location_1$ the $item$ was in the $location_2$. "
        "Give only this sentence, with no explanation.",
    ),
    "qa4": TaskPrompt(
        "The context below tells how rooms lie relative to each other. Answer the question about "
        "which room is in a given direction.",
        (
            _ex(
                "The kitchen is west of the garden. The office is north of the garden.",
                "What is west of the garden?",
                "kitchen",
            ),
            _ex("The bedroom is south of the hallway.", "What is south of the hallway?", "bedroom"),
            _ex(
                "The bathroom is east of the office. The office is east of the kitchen.",
                "What is the office west of?",
                "bathroom",
            ),
        ),
        _ONE_LOC,
    ),
    "qa5": TaskPrompt(
        "The context below describes people passing objects to one another. Answer the question "
        "about who gave, who received or what was passed.",
        (
            _ex("Mary took the milk. Mary handed the milk to Jeff.", "Who received the milk?", "Jeff"),
            _ex("Bill passed the football to Fred.", "What did Bill give to Fred?", "football"),
            _ex("Jeff gave the apple to Mary. Mary gave the apple to Bill.", "Who gave the apple to Bill?", "Mary"),
        ),
        "Reply with a single word and no explanation.",
    ),
    "qa6": TaskPrompt(
        "The context below describes where people go. Decide whether the statement in the question "
        "holds for the person's latest location.",
        (
            _ex("John went to the hallway. John went to the garden.", "Is John in the garden?", "yes"),
            _ex("Mary moved to the office.", "Is Mary in the kitchen?", "no"),
        ),
        _YESNO,
    ),
    "qa7": TaskPrompt(
        "The context below describes people picking up, dropping and handing over objects. Count how "
        "many objects the person in the question is carrying now.",
        (
            _ex("Daniel took the apple. Daniel took the milk.", "How many objects is Daniel carrying?", "two"),
            _ex(
                "Sandra got the football. Sandra dropped the football.", "How many objects is Sandra carrying?", "none"
            ),
            _ex("Fred picked up the milk.", "How many objects is Fred carrying?", "one"),
        ),
        "Reply with one word: none, or the number written as a word. Do not explain.",
    ),
    "qa8": TaskPrompt(
        "The context below describes people picking up, dropping and handing over objects. List what "
        "the person in the question is carrying now.",
        (
            _ex("John took the apple. John took the football.", "What is John carrying?", "apple,football"),
            _ex("Mary got the milk. Mary put down the milk.", "What is Mary carrying?", "nothing"),
            _ex("Bill picked up the football.", "What is Bill carrying?", "football"),
        ),
        "Reply with nothing, one object, or several objects separated by commas without spaces "
        "(object_1,object_2). Do not explain.",
    ),
    "qa9": TaskPrompt(
        "The context below says where people are or are not. Statements with 'not' or 'no longer' "
        "rule a place out. Decide whether the question's statement is true.",
        (
            _ex("Sandra is not in the garden.", "Is Sandra in the garden?", "no"),
            _ex("John is no longer in the office. John went to the kitchen.", "Is John in the kitchen?", "yes"),
        ),
        _YESNO,
    ),
    "qa10": TaskPrompt(
        "The context below may leave a person's place uncertain ('either ... or ...'). Decide whether "
        "the question's statement is certainly true, certainly false, or possibly true.",
        (
            _ex("Bill is in the park.", "Is Bill in the park?", "yes"),
            _ex("Fred is either in the school or the office.", "Is Fred in the office?", "maybe"),
            _ex("Julie is either in the cinema or the kitchen.", "Is Julie in the park?", "no"),
        ),
        "Reply with one word only: yes, no or maybe.",
    ),
    "qa11": TaskPrompt(
        "The context below describes where people go; later sentences may refer to a person as 'he' "
        "or 'she'. Work out who is meant and answer where the person is.",
        (
            _ex("Daniel went to the kitchen. After that he went to the garden.", "Where is Daniel?", "garden"),
            _ex("Mary travelled to the office. Then she moved to the bathroom.", "Where is Mary?", "bathroom"),
            _ex("John went to the hallway. Afterwards he went back to the bedroom.", "Where is John?", "bedroom"),
        ),
        _ONE_LOC,
    ),
    "qa12": TaskPrompt(
        "The context below describes where people go, sometimes two people together ('A and B went "
        "to ...'). Answer where the person in the question is.",
        (
            _ex("Mary and John went to the office.", "Where is John?", "office"),
            _ex("Sandra and Daniel moved to the garden. Daniel went to the kitchen.", "Where is Sandra?", "garden"),
            _ex(
                "John and Mary travelled to the hallway. Mary and John went to the bedroom.",
                "Where is Mary?",
                "bedroom",
            ),
        ),
        _ONE_LOC,
    ),
    "qa13": TaskPrompt(
        "The context below describes where people go; 'they' may refer to a pair mentioned before. "
        "Answer where the person in the question is.",
        (
            _ex("Daniel and Sandra went to the garden. Then they went to the office.", "Where is Sandra?", "office"),
            _ex(
                "Mary and John moved to the kitchen. Following that they went to the hallway.",
                "Where is John?",
                "hallway",
            ),
            _ex(
                "John and Daniel went to the bathroom. Afterwards they travelled to the bedroom.",
                "Where is Daniel?",
                "bedroom",
            ),
        ),
        _ONE_LOC,
    ),
    "qa14": TaskPrompt(
        "The context below says where people were at different times of day (morning, afternoon, "
        "evening, yesterday). Order the events in time and answer the question.",
        (
            _ex(
                "This morning Bill went to the school. This afternoon Bill went to the park.",
                "Where was Bill before the park?",
                "school",
            ),
            _ex(
                "Yesterday Julie was in the office. This morning Julie went to the cinema.",
                "Where was Julie before the cinema?",
                "office",
            ),
            _ex(
                "In the evening Fred went to the kitchen. This afternoon Fred went to the bedroom.",
                "Where was Fred before the kitchen?",
                "bedroom",
            ),
        ),
        _ONE_LOC,
    ),
    "qa15": TaskPrompt(
        "The context below states facts about kinds of animals and what they are afraid of. Deduce the "
        "answer from these facts.",
        (
            _ex("Wolves are afraid of cats. Emily is a wolf.", "What is Emily afraid of?", "cat"),
            _ex("Sheep are afraid of mice. Gertrude is a sheep.", "What is Gertrude afraid of?", "mouse"),
            _ex("Cats are afraid of wolves. Jessica is a cat.", "What is Jessica afraid of?", "wolf"),
        ),
        "Reply with a single word: an animal species. Do not explain.",
    ),
    "qa16": TaskPrompt(
        "The context below states facts about animals and their colours. Infer the colour of the animal "
        "in the question from animals of the same kind.",
        (
            _ex("Lily is a frog. Lily is green. Bernhard is a frog.", "What color is Bernhard?", "green"),
            _ex("Brian is a swan. Brian is white. Greg is a swan.", "What color is Greg?", "white"),
            _ex("Julius is a lion. Julius is yellow. Lily is a lion.", "What color is Lily?", "yellow"),
        ),
        "Reply with a single word: a colour. Do not explain.",
    ),
    "qa17": TaskPrompt(
        "The context below describes how shapes are placed relative to one another. Decide whether the "
        "spatial statement in the question is true.",
        (
            _ex(
                "The red square is to the left of the blue circle.",
                "Is the blue circle to the right of the red square?",
                "yes",
            ),
            _ex("The triangle is above the pink rectangle.", "Is the pink rectangle above the triangle?", "no"),
            _ex(
                "The red sphere is below the box. The box is below the triangle.",
                "Is the triangle above the red sphere?",
                "yes",
            ),
        ),
        _YESNO,
    ),
    "qa18": TaskPrompt(
        "The context below compares the sizes of objects. Decide whether the size statement in the question is true.",
        (
            _ex("The box is bigger than the chocolate.", "Does the chocolate fit in the box?", "yes"),
            _ex("The suitcase is bigger than the chest.", "Is the suitcase smaller than the chest?", "no"),
            _ex(
                "The container is bigger than the box. The box is bigger than the chocolate.",
                "Is the chocolate bigger than the container?",
                "no",
            ),
        ),
        _YESNO,
    ),
    "qa19": TaskPrompt(
        "The context below tells where places lie relative to each other. Find the route between the two "
        "places in the question as two steps, each written as a compass letter: n (north), s (south), "
        "e (east), w (west).",
        (
            _ex(
                "The kitchen is north of the hallway. The garden is east of the kitchen.",
                "How do you go from the hallway to the garden?",
                "n,e",
            ),
            _ex(
                "The office is west of the bedroom. The bathroom is south of the office.",
                "How do you go from the bedroom to the bathroom?",
                "w,s",
            ),
            _ex(
                "The garden is south of the office. The kitchen is south of the garden.",
                "How do you go from the kitchen to the office?",
                "n,n",
            ),
        ),
        "Reply with two letters from n, s, e, w separated by a comma, for example n,w. Do not explain.",
    ),
    "qa20": TaskPrompt(
        "The context below describes how people feel and what they do. Infer why someone went "
        "somewhere or where someone will go.",
        (
            _ex("Sumit is hungry.", "Where will Sumit go?", "kitchen"),
            _ex("Yann is thirsty. Yann went to the kitchen.", "Why did Yann go to the kitchen?", "thirsty"),
            _ex("Antoine is tired.", "Where will Antoine go?", "bedroom"),
        ),
        "Reply with a single word: a feeling or a place. Do not explain.",
    ),
    "niah": TaskPrompt(
        "Somewhere in the text below a special magic uuid is hidden for a given key. Find it.",
        (
            _ex(
                "... The grass was wet. One of the special magic uuids for quiet-river is: "
                "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0. The train left late. ...",
                "What is the special magic uuid for quiet-river mentioned in the provided text?",
                "The special magic uuid for quiet-river mentioned in the provided text is "
                "'0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0'.",
            ),
        ),
        "Answer in the form: The special magic uuid for 'key' mentioned in the provided text is 'uuid'.",
    ),
    "niahmv": TaskPrompt(
        "Somewhere in the text below several special magic numbers are hidden for a given key. Find all of them.",
        (
            _ex(
                "... One of the special magic numbers for red-lamp is: 4417. Rain fell all night. One of "
                "the special magic numbers for red-lamp is: 90213. ...",
                "What are all the special magic numbers for red-lamp mentioned in the provided text?",
                "The magic numbers are 4417,90213",
            ),
        ),
        "Answer in the form: The magic numbers are n1,n2,... with the numbers separated by commas and no spaces.",
    ),
}


def babilong_user_message(task: str, context: str, question: str, extra_question_mark: bool = False) -> str:
    """Instruction, examples, post-prompt, ``Context: ...``, blank line, ``Question: ...``; stripped.
    ``extra_question_mark`` (``legacy.prompt_extra_question_mark``) appends the ref's extra '?'."""
    p = TASK_PROMPTS[task_key(task)]
    q = f"{question}?" if extra_question_mark else question
    text = f"{p.instruction}\n{p.examples_block()}\n{p.post_prompt}\nContext: {context}\n\nQuestion: {q}"
    return text.strip()


def babilong_messages(task: str, context: str, question: str, extra_question_mark: bool = False) -> list[dict]:
    return [
        {"role": "system", "content": SYSTEM_BABILONG},
        {"role": "user", "content": babilong_user_message(task, context, question, extra_question_mark)},
    ]


SYSTEM_OPENQA = (
    "Answer the question using the passages you are given. Keep the answer short and precise, keep any "
    "reasoning brief, and always end your reply with 'Final answer: ' followed by the answer."
)


def openqa_messages(passages: list[str], question: str) -> list[dict]:
    """Passages in the order given (retrieval order), blank-line separated, then the question."""
    body = "\n\n".join(passages)
    user = f"GIVEN PASSAGES:\n{body}\n---\n\nQUESTION:\n{question}\n\nFinal answer: "
    return [{"role": "system", "content": SYSTEM_OPENQA}, {"role": "user", "content": user}]


def extract_final_answer(output: str) -> str:
    """Text after the last ``Final answer:`` (stripped), else the whole output stripped."""
    marker = "final answer:"
    pos = output.lower().rfind(marker)
    if pos == -1:
        return output.strip()
    return output[pos + len(marker) :].strip()


def strip_think(output: str) -> str:
    """The answer part of a reasoning model's output: the text after the last ``</think>``
    (QwQ's template opens the block in the prompt, so only the closing tag may appear); an
    opened block that never closes (generation cut inside the reasoning) leaves the text before
    ``<think>``, usually nothing. Outputs without the tags are returned unchanged."""
    close = output.rfind("</think>")
    if close != -1:
        return output[close + len("</think>") :]
    start = output.find("<think>")
    return output if start == -1 else output[:start]
