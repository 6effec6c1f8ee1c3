from memdir.demo import main

main()
